__global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// A per-thread array indexed at run time cannot live in registers: local memory.
__global__ void local_array(float* out, const int* idx, int n) {
    float buf[256];
    for (int j = 0; j < 256; ++j) buf[j] = out[j * n + threadIdx.x];
    out[threadIdx.x] = buf[idx[threadIdx.x] & 255];
}

import socket

# Reaching out at import time: the sandbox has no network, so this fails here.
socket.create_connection(("203.0.113.1", 80), timeout=5)

import triton  # noqa: E402

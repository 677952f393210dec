"""`infra-agent eval`: can a model, through these tools, find what is wrong? Tasks with planted
causes (tasks.py, kernel_tasks.py), the answer form the agent submits (submit.py), grading by
ground truth (grade.py), and the runner over the agent loop (runner.py, command.py)."""

"""Training jobs on Ray: deterministic submission, status, logs, stop, and the job driver
that resumes from the last complete checkpoint and checks the run really finished."""

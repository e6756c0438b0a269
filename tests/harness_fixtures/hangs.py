"""Not a case: a script whose ranks wait forever, to test that the wall-clock limit kills every rank."""
import os
import time

print(f"PID {os.getpid()}", flush=True)
time.sleep(600)

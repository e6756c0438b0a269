"""A progress line for long checks: `fsdplint: 120/5128 files analyzed` on a terminal, redrawn in place.

A check shorter than `DELAY_SECONDS` shows nothing. A heartbeat thread draws the line even while one
large group of files keeps the engine from reporting for a long time; the line is erased at the end,
so that nothing of it is left between the findings. The worker processes the engine forks while the
thread runs never write to the terminal, so a fork in the middle of a write cannot block them.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

DELAY_SECONDS = 1.0
REFRESH_SECONDS = 0.1


class ProgressLine:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.due = time.monotonic() + DELAY_SECONDS
        self.counts: tuple[int, int] | None = None  # (files analyzed, files in all), once the engine says
        self.drawn = ""
        self.lock = threading.Lock()  # the engine's thread and the heartbeat both draw
        self.stopped = threading.Event()
        self.heartbeat = threading.Thread(target=self._beat, name="fsdplint-progress", daemon=True)

    def __enter__(self) -> ProgressLine:
        self.heartbeat.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopped.set()
        self.heartbeat.join()
        if self.drawn:
            self._write(" " * len(self.drawn))  # erase: spaces work on any terminal, escape codes not
            self.stream.write("\r")
            self.stream.flush()

    def update(self, done: int, total: int) -> None:
        with self.lock:
            self.counts = (done, total)
            self._draw()

    def _beat(self) -> None:
        while not self.stopped.wait(REFRESH_SECONDS):
            with self.lock:
                self._draw()

    def _draw(self) -> None:
        if self.counts is None or time.monotonic() < self.due:
            return
        text = f"fsdplint: {self.counts[0]}/{self.counts[1]} files analyzed"
        if text != self.drawn:
            self._write(text.ljust(len(self.drawn)))
            self.drawn = text

    def _write(self, text: str) -> None:
        self.stream.write("\r" + text)
        self.stream.flush()

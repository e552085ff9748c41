"""Progress of long calls: a tqdm bar when tqdm is installed (notebook widgets through tqdm.auto),
plain lines on stderr otherwise, or the caller's own callable."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class _TqdmBar:
    """A tqdm bar over bytes (index) or modelled work in per-mille steps (analyses)."""

    def __init__(self, tqdm: Any, label: str, bytes_: bool):
        self._bytes = bytes_
        self._bar = None
        self._tqdm = tqdm
        self._label = label

    def __call__(self, done: float, total: float, current: str, seconds: float) -> None:
        if self._bar is None:
            if self._bytes:
                self._bar = self._tqdm(total=int(total), unit="B", unit_scale=True, desc=self._label, leave=True)
            else:
                self._bar = self._tqdm(total=1000, desc=self._label, leave=True,
                                       bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}")
        target = int(done) if self._bytes else int(1000 * done / total) if total > 0 else 1000
        self._bar.update(max(0, target - self._bar.n))
        self._bar.set_postfix_str(current[-48:], refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _PlainLines:
    """Redrawn on a terminal, one line every two seconds otherwise; always the last state."""

    def __init__(self, label: str, bytes_: bool):
        self._label = label
        self._bytes = bytes_
        self._last = 0.0
        self._drawn = False
        self._terminal = sys.stderr.isatty()

    def __call__(self, done: float, total: float, current: str, seconds: float) -> None:
        complete = done >= total
        now = time.monotonic()
        if not complete and now - self._last < (0.1 if self._terminal else 2.0):
            return
        self._last = now
        fraction = done / total if total > 0 else 1.0
        amounts = f"{_human_bytes(done)} of {_human_bytes(total)}" if self._bytes else ""
        eta = ""
        if 0 < fraction < 1 and seconds > 0:
            eta = f", about {seconds * (1 - fraction) / fraction:.0f} s left"
        line = f"{self._label} {100 * fraction:5.1f}% {amounts}{eta}  {current[-48:]}"
        if self._terminal:
            sys.stderr.write("\r\x1b[2K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn and self._terminal:
            sys.stderr.write("\n")
            sys.stderr.flush()


def progress_callback(progress: Any, label: str, bytes_: bool) -> Callable[[float, float, str, float], Any] | None:
    """The callable the native module reports to: None for no display, the caller's own, or a bar."""
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainLines(label, bytes_)
    return _TqdmBar(tqdm, label, bytes_)

"""The on-disk cache: `.fsdplint_cache/` unless `--cache-dir` says otherwise, off with `--no-cache`.

Two stores, both safe for runs that share them (every write is a temporary file renamed over the
target, and every entry checks itself):

- `files-<key>.json`, the file index: for each file, its stat signature, the hash of its bytes and
  which watched tokens it holds, so that an unchanged file is not even read. An entry is trusted only
  if the file's mtime lies well before the moment it was recorded (git's "racily clean" rule: a file
  written within the timestamp granularity of its read is read again). Beside the files: for each set
  of paths a run was asked about, the plan it made and a digest of every file's hash it was made from.
- `results/<key>.json`, the findings of one unit of the plan, keyed by the hash of: fsdplint's version
  and the stat of its own source files, the configuration, and each file of the unit (path, module
  name, content hash). A unit is one cross-file group: its findings depend on its files only (see
  `fsdplint.plan`), so editing either file of a cross-file pair changes the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fsdplint import __version__

RACY_NS = 2_000_000_000  # FAT and some network filesystems keep mtimes to 2 s


def digest(*parts: object) -> str:
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def code_fingerprint() -> str:
    """fsdplint's version and the stat of its own modules: an edited rule never reads old results."""
    import fsdplint
    import fsdplint.rules

    package = Path(fsdplint.__file__).parent
    stats = []
    # fsdplint/model/ by its path: importing the package would import libcst, which a run with no FSDP code never needs.
    for folder in (package, package / "model", *map(Path, fsdplint.rules.__path__)):
        for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
            if entry.name.endswith(".py"):
                stat = entry.stat()
                stats.append((entry.path, stat.st_mtime_ns, stat.st_size))
    return digest(__version__, stats)


@dataclass
class FileFacts:
    hash: str
    tokens: list[str]  # the watched tokens the text holds


def signature(stat: os.stat_result) -> list[int]:
    return [stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino]


@dataclass
class Index:
    files: dict[str, list] = field(default_factory=dict)  # absolute path -> signature + [recorded_ns, hash, tokens]
    scopes: dict[str, dict] = field(default_factory=dict)  # scope key -> {"digest": ..., "units": [[paths, parse]]}
    dirty: bool = False

    def lookup(self, path: str, stat: os.stat_result) -> FileFacts | None:
        entry = self.files.get(path)
        if entry is None or entry[:4] != signature(stat) or stat.st_mtime_ns > entry[4] - RACY_NS:
            return None
        return FileFacts(entry[5], entry[6])

    def record(self, path: str, stat: os.stat_result, recorded_ns: int, facts: FileFacts) -> None:
        entry = signature(stat) + [recorded_ns, facts.hash, facts.tokens]
        if self.files.get(path) != entry:
            self.files[path] = entry
            self.dirty = True

    def set_scope(self, key: str, record: dict) -> None:
        if self.scopes.get(key) != record:
            self.scopes[key] = record
            self.dirty = True


class Cache:
    def __init__(self, folder: Path, index_key: str) -> None:
        self.folder = folder
        self.index_path = folder / f"files-{index_key}.json"

    @staticmethod
    def now_ns() -> int:
        return time.time_ns()

    def load_index(self) -> Index:
        try:
            data = json.loads(self.index_path.read_bytes())
            return Index(files=data["files"], scopes=data["scopes"])
        except (OSError, ValueError, KeyError, TypeError):
            return Index()

    def save_index(self, index: Index) -> None:
        if index.dirty:
            self._write(self.index_path, json.dumps({"files": index.files, "scopes": index.scopes}, separators=(",", ":")))

    def _result_path(self, key: str) -> Path:
        return self.folder / "results" / key[:2] / f"{key}.json"

    def load_result(self, key: str) -> list[dict] | None:
        try:
            return json.loads(self._result_path(key).read_bytes())
        except (OSError, ValueError):
            return None

    def save_result(self, key: str, diagnostics: list[dict]) -> None:
        self._write(self._result_path(key), json.dumps(diagnostics, separators=(",", ":")))

    def _write(self, path: Path, text: str) -> None:
        """Atomically, and silently not at all where the folder cannot be written: a cache is optional."""
        try:
            if not self.folder.is_dir():
                self.folder.mkdir(parents=True, exist_ok=True)
                # Like ruff's cache: never committed, never backed up.
                (self.folder / ".gitignore").write_text("# Automatically created by fsdplint.\n*\n")
                (self.folder / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(descriptor, "w") as handle:
                    handle.write(text)
                os.replace(temp, path)
            except BaseException:
                os.unlink(temp)
                raise
        except OSError:
            pass

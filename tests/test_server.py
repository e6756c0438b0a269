"""The language server, driven over stdio as an editor drives it: a real `fsdplint server` process and
a small JSON-RPC client that opens a bad script, reads the diagnostics, applies a quick fix and sees
the file come back clean."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

TIMEOUT = 30  # seconds for one reply; a loaded machine can be slow to start the server

FORWARD = textwrap.dedent("""\
    from torch.distributed.fsdp import fully_shard


    def step(model, x):
        fully_shard(model)
        label = "héllo 🙂 wörld"; out = model.forward(x)  # 🙂 is two UTF-16 units, four UTF-8 bytes
        return out
""")

OPTIMIZER_FIRST = textwrap.dedent("""\
    import torch
    from torch.distributed.fsdp import fully_shard


    def build(model):
        optimizer = torch.optim.AdamW(model.parameters())
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return optimizer
""")

# Issue 13's program: the helper is right, its caller calls it before sharding.
HELPER_TOO_EARLY = textwrap.dedent("""\
    import torch
    from torch.distributed.fsdp import fully_shard


    def build_optimizer(model):
        return torch.optim.AdamW(model.parameters())


    def apply_fsdp(model):
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)


    def main(model, batches):
        optimizer = build_optimizer(model)
        apply_fsdp(model)
        for batch in batches:
            model(batch).sum().backward()
            optimizer.step()
""")


class LspClient:
    """Content-Length framed JSON-RPC over the server's stdin and stdout."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "fsdplint", "server"], cwd=cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: queue.Queue[dict] = queue.Queue()
        self.notifications: list[dict] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (header := stream.readline()) not in (b"\r\n", b""):
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            if length is None:
                return
            self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict | None) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            message = self._next()
            if message.get("id") == self.next_id and "method" not in message:
                assert "error" not in message, message["error"]
                return message["result"]
            self.notifications.append(message)

    def notification(self, method: str, uri: str | None) -> dict:
        """The next `method` notification about `uri` (None: about no document); ones already received count."""
        while True:
            for index, message in enumerate(self.notifications):
                if message.get("method") == method and message["params"].get("uri") == uri:
                    return self.notifications.pop(index)["params"]
            self.notifications.append(self._next())

    def _next(self) -> dict:
        try:
            return self.messages.get(timeout=TIMEOUT)
        except queue.Empty:
            self.process.kill()
            raise AssertionError(f"no reply from the server; stderr: {self.process.stderr.read().decode()[-2000:]}") from None

    def close(self) -> int:
        self.request("shutdown", None)
        self.notify("exit", None)
        return self.process.wait(timeout=TIMEOUT)


def units(text: str, encoding: str) -> int:
    return len(text.encode({"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}[encoding])) // {"utf-8": 1, "utf-16": 2, "utf-32": 4}[encoding]


def offset(text: str, position: dict, encoding: str) -> int:
    """Where an LSP position falls in `text`, walking its line in the negotiated units."""
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", text) + [""]
    start = sum(len(line) for line in lines[:position["line"]])
    line, counted, index = lines[position["line"]], 0, 0
    while counted < position["character"]:
        counted += units(line[index], encoding)
        index += 1
    assert counted == position["character"], "a position inside a character"
    return start + index


def apply(text: str, edits: list[dict], encoding: str) -> str:
    for edit in sorted(edits, key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]), reverse=True):
        text = text[:offset(text, edit["range"]["start"], encoding)] + edit["newText"] + text[offset(text, edit["range"]["end"], encoding):]
    return text


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(FORWARD, encoding="utf-8")
    (tmp_path / "build.py").write_text(OPTIMIZER_FIRST, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_diagnostics_and_quick_fixes_over_stdio(project: Path, encoding: str):
    client = LspClient(project)
    # A client that offers nothing gets UTF-16, LSP's default; one that offers UTF-8 gets it.
    offered = {"general": {"positionEncodings": ["utf-8", "utf-16"]}} if encoding == "utf-8" else {}
    reply = client.request("initialize", {"processId": None, "rootUri": project.as_uri(), "capabilities": offered})
    assert reply["capabilities"].get("positionEncoding", "utf-16") == encoding
    assert "quickfix" in reply["capabilities"]["codeActionProvider"]["codeActionKinds"]
    client.notify("initialized", {})

    uri = (project / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": FORWARD}})
    published = client.notification("textDocument/publishDiagnostics", uri)
    [diagnostic] = published["diagnostics"]
    assert (diagnostic["code"], diagnostic["source"], diagnostic["severity"]) == ("FSDP103", "fsdplint", 1)
    assert diagnostic["codeDescription"] == {"href": "https://github.com/fsdplint/fsdplint/blob/main/docs/rules/FSDP103.md"}
    line = FORWARD.splitlines()[5]
    assert diagnostic["range"]["start"] == {"line": 5, "character": units(line[:line.index("model.forward")], encoding)}
    start, end = offset(FORWARD, diagnostic["range"]["start"], encoding), offset(FORWARD, diagnostic["range"]["end"], encoding)
    assert FORWARD[start:end] == "model.forward(x)"

    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": diagnostic["range"], "context": {"diagnostics": [diagnostic]}})
    [quick_fix] = [action for action in actions if action["kind"] == "quickfix"]
    assert quick_fix["isPreferred"] is True and "FSDP103" in quick_fix["title"] and "unsafe" not in quick_fix["title"]
    fixed = apply(FORWARD, quick_fix["edit"]["changes"][uri], encoding)
    assert fixed == FORWARD.replace("model.forward(x)", "model(x)")
    [fix_all] = [action for action in actions if action["kind"] == "source.fixAll.fsdplint"]
    assert apply(FORWARD, fix_all["edit"]["changes"][uri], encoding) == fixed

    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]})
    published = client.notification("textDocument/publishDiagnostics", uri)
    assert (published["version"], published["diagnostics"]) == (2, [])

    # An unsafe fix is offered too, labelled and not preferred.
    other = (project / "build.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": other, "languageId": "python", "version": 1, "text": OPTIMIZER_FIRST}})
    [diagnostic] = client.notification("textDocument/publishDiagnostics", other)["diagnostics"]
    assert diagnostic["code"] == "FSDP104"
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": other}, "range": diagnostic["range"], "context": {"diagnostics": [diagnostic], "only": ["quickfix"]}})
    [unsafe] = actions
    assert "unsafe" in unsafe["title"] and unsafe["isPreferred"] is False
    moved = apply(OPTIMIZER_FIRST, unsafe["edit"]["changes"][other], encoding)
    assert moved.index("fully_shard(model)") < moved.index("optimizer = ")
    client.notify("textDocument/didChange", {"textDocument": {"uri": other, "version": 2}, "contentChanges": [{"text": moved}]})
    assert client.notification("textDocument/publishDiagnostics", other)["diagnostics"] == []

    client.notify("textDocument/didClose", {"textDocument": {"uri": other}})
    assert client.notification("textDocument/publishDiagnostics", other)["diagnostics"] == []

    # The nearest pyproject.toml applies, with paths relative to it as `per-file-ignores` expects.
    configured = project / "sub" / "scripts" / "train.py"
    configured.parent.mkdir(parents=True)
    (project / "sub" / "pyproject.toml").write_text('[tool.fsdplint]\nper-file-ignores = { "scripts/*" = ["FSDP103"] }\n')
    client.notify("textDocument/didOpen", {"textDocument": {"uri": configured.as_uri(), "languageId": "python", "version": 1, "text": FORWARD}})
    assert client.notification("textDocument/publishDiagnostics", configured.as_uri())["diagnostics"] == []
    # An invalid nearest pyproject.toml: one message naming it, and the file is checked with the defaults.
    for folder, config, complaint in [
        ("not_a_list", '[tool.fsdplint]\nselect = "FSDP1"\n', '[tool.fsdplint] select must be a list of strings'),
        ("unknown_code", '[tool.fsdplint]\nper-file-ignores = { "*" = ["FSDP999"] }\n', "unknown rule selector `FSDP999`"),
        ("not_toml", "[tool.fsdplint\nselect = [\n", "invalid TOML"),
    ]:
        broken = project / folder / "train.py"
        broken.parent.mkdir()
        (project / folder / "pyproject.toml").write_text(config)
        client.notify("textDocument/didOpen", {"textDocument": {"uri": broken.as_uri(), "languageId": "python", "version": 1, "text": FORWARD}})
        assert [d["code"] for d in client.notification("textDocument/publishDiagnostics", broken.as_uri())["diagnostics"]] == ["FSDP103"]
        message = client.notification("window/showMessage", None)
        assert message["type"] == 1  # Error
        assert message["message"].startswith(f"fsdplint: {project / folder / 'pyproject.toml'}: ") and complaint in message["message"]
        assert message["message"].endswith("; checking with the default settings until it is fixed")
        actions = client.request("textDocument/codeAction", {"textDocument": {"uri": broken.as_uri()}, "range": {
            "start": {"line": 5, "character": 0}, "end": {"line": 6, "character": 0}}, "context": {"diagnostics": []}})
        assert {action["kind"] for action in actions} == {"quickfix", "source.fixAll.fsdplint"}
    # Shown once, not on every edit.
    client.notify("textDocument/didChange", {"textDocument": {"uri": broken.as_uri(), "version": 2}, "contentChanges": [{"text": FORWARD + "\n"}]})
    client.notification("textDocument/publishDiagnostics", broken.as_uri())
    assert not [m for m in client.notifications if m.get("method") == "window/showMessage"]
    assert client.close() == 0


def test_related_information(tmp_path: Path):
    client = LspClient(tmp_path)
    client.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    client.notify("initialized", {})
    uri = (tmp_path / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": HELPER_TOO_EARLY}})
    [diagnostic] = client.notification("textDocument/publishDiagnostics", uri)["diagnostics"]
    assert diagnostic["code"] == "FSDP104"
    # On the caller's call, the places it involves as related information.
    assert diagnostic["range"] == {"start": {"line": 15, "character": 16}, "end": {"line": 15, "character": 38}}
    assert diagnostic["relatedInformation"] == [
        {"location": {"uri": uri, "range": {"start": {"line": 5, "character": 11}, "end": {"line": 5, "character": 48}}},
         "message": "optimizer built here"},
        {"location": {"uri": uri, "range": {"start": {"line": 10, "character": 8}, "end": {"line": 10, "character": 26}}},
         "message": "sharded here"},
    ]
    assert client.close() == 0


def test_server_without_pygls_says_how_to_install_it():
    hide_pygls = "import sys; sys.modules['pygls'] = None; from fsdplint.cli import main; main(['server'])"
    result = subprocess.run([sys.executable, "-c", hide_pygls], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2
    # fsdplint is not on PyPI: the hint installs from the repository, or from a checkout.
    assert "pip install 'fsdplint[lsp] @ git+https://github.com/fsdplint/fsdplint'" in result.stderr
    assert "pip install -e '.[lsp]'" in result.stderr and "Traceback" not in result.stderr

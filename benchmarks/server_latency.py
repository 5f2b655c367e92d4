"""How long `gradfix server` takes to publish a file's diagnostics after an edit, warm.

An LSP client (pygls's) starts `gradfix server` over stdio as an editor does and opens the training
file benchmarks/analysis_scaling.py generates (about 580 lines for --lines 500, with five
findings), in a folder of its own; the first diagnostics are cold (the server's imports, the
project's walk). Then it edits one line EDITS times, waiting each time for the diagnostics of the
new version: the latency is the time from the didChange sent to the publishDiagnostics received.
Beside it, the same check in this process (`check_source`, every rule): the rest is the server's
(the protocol, settings, positions). Target: at most 150 ms warm.
Usage: python benchmarks/server_latency.py [--lines N] [--edits N]   (needs the server extra)
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import BaseLanguageClient

from analysis_scaling import seconds, training_file
from gradfix.codemods.report import FixMode


class Client(BaseLanguageClient):
    """Says when the diagnostics of each version of the document arrive."""

    def __init__(self) -> None:
        super().__init__("server-latency", "1")
        self.arrivals: dict[int, asyncio.Future[tuple[float, int]]] = {}

        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(ls: Client, params: types.PublishDiagnosticsParams) -> None:
            ls.arrival(params.version).set_result((time.perf_counter(), len(params.diagnostics)))

    def arrival(self, version: int) -> asyncio.Future[tuple[float, int]]:
        return self.arrivals.setdefault(version, asyncio.get_running_loop().create_future())


async def latencies(text: str, folder: Path, edits: int) -> tuple[float, int, list[float]]:
    """Seconds to the first diagnostics, their number, and the seconds after each edit."""
    (folder / ".git").mkdir()  # a project of its own: no settings or modules from above
    path = folder / "train.py"
    path.write_text(text)
    client = Client()
    await client.start_io(sys.executable, "-P", "-m", "gradfix", "server")
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(), process_id=None))
    client.initialized(types.InitializedParams())
    started = time.perf_counter()
    item = types.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=text)
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
    arrived, found = await client.arrival(1)
    cold = arrived - started
    warm = []
    for version in range(2, edits + 2):
        # A digit typed into a setting: the same findings at every version.
        edited = text.replace("BATCH = 16", f"BATCH = {16 + version}", 1)
        document = types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version)
        change = types.TextDocumentContentChangeWholeDocument(text=edited)
        started = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(text_document=document, content_changes=[change]))
        arrived, found_now = await client.arrival(version)
        assert found_now == found, (found_now, found)
        warm.append(arrived - started)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return cold, found, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--edits", type=int, default=20)
    options = parser.parse_args()
    source = training_file(options.lines)
    with tempfile.TemporaryDirectory() as folder:
        cold, found, warm = asyncio.run(latencies(source.decode(), Path(folder), options.edits))
    in_process = min(seconds(source, FixMode.NONE)[0] for _ in range(5))
    milliseconds = sorted(1000 * s for s in warm)
    lines = source.count(b"\n")
    print(f"file: {lines} lines, {found} diagnostics")
    print(f"first diagnostics (cold server): {1000 * cold:.0f} ms")
    print(
        f"after an edit, warm, {len(warm)} edits: median {statistics.median(milliseconds):.0f} ms,"
        f" min {milliseconds[0]:.0f} ms, max {milliseconds[-1]:.0f} ms (target: at most 150 ms)"
    )
    print(f"the same check in this process (check_source, best of 5): {1000 * in_process:.0f} ms")


if __name__ == "__main__":
    main()

"""A local NVIDIA DCGM exporter: one node's GPUs as dcgm-exporter shows them on ``GET /metrics``.

Each GPU has utilisation, frame-buffer memory used and free, power, the last XID error and NVLink error
counters under dcgm-exporter's ``DCGM_FI_*`` names and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``). It can misbehave as a real node does::

    with DcgmExporter(gpus=8) as dcgm:
        dcgm.configure(utilisation=100, power_watts=1100)   # healthy and busy: no alert
        dcgm.xid(3, 79)                                     # GPU 3 fell off the bus
        dcgm.nvlink_errors(5, 12)                           # NVLink CRC errors grow on GPU 5
        dcgm.lose_gpu(7)                                    # GPU 7 no longer reports
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

MODEL = "NVIDIA B300"
FB_TOTAL_MIB = 288 * 1024


@dataclass(frozen=True)
class Gpu:
    utilisation: float = 35.0
    memory_used_mib: float = 0.9 * FB_TOTAL_MIB
    power_watts: float = 600.0
    xid: int = 0
    nvlink_crc: float = 0.0


class DcgmExporter:
    """The exporter, serving in a background thread on 127.0.0.1 and an ephemeral port."""

    def __init__(self, *, gpus: int = 8, host: str = "127.0.0.1", hostname: str = "hyperpod-i-0p6-b300-48xlarge") -> None:
        self._gpus: dict[int, Gpu] = {i: Gpu() for i in range(gpus)}
        self._lock = threading.Lock()
        self._address = (host, 0)
        self.hostname = hostname
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.up = True  # False answers 503, as an exporter whose DCGM host engine is gone

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the DCGM exporter stand-in is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def configure(self, gpu: int | None = None, **fields: Any) -> None:
        """Change fields of one GPU (``gpu``) or of all."""
        with self._lock:
            for index in [gpu] if gpu is not None else list(self._gpus):
                self._gpus[index] = replace(self._gpus[index], **fields)

    def xid(self, gpu: int, code: int) -> None:
        self.configure(gpu, xid=code)

    def nvlink_errors(self, gpu: int, more: float) -> None:
        with self._lock:
            self._gpus[gpu] = replace(self._gpus[gpu], nvlink_crc=self._gpus[gpu].nvlink_crc + more)

    def lose_gpu(self, gpu: int) -> None:
        with self._lock:
            self._gpus.pop(gpu, None)

    def text(self) -> str:
        with self._lock:
            gpus = dict(self._gpus)
        series: tuple[tuple[str, str, str, Callable[[Gpu], float]], ...] = (
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: g.utilisation),
            ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda g: g.memory_used_mib),
            ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
             lambda g: FB_TOTAL_MIB - g.memory_used_mib),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: g.power_watts),
            ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda g: g.xid),
            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter",
             "Total number of NVLink flow-control CRC errors.", lambda g: g.nvlink_crc),
        )
        lines: list[str] = []
        for name, kind, help_, value in series:
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            for index, gpu in sorted(gpus.items()):
                labels = (f'gpu="{index}",UUID="GPU-{index:08x}-0000-0000-0000-000000000000",device="nvidia{index}",'
                          f'modelName="{MODEL}",Hostname="{self.hostname}"')
                lines.append(f"{name}{{{labels}}} {value(gpu):g}")
        return "\n".join(lines) + "\n"

    def start(self) -> DcgmExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                if not exporter.up:
                    self.send_error(503, "DCGM host engine is not running")
                    return
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        httpd = ThreadingHTTPServer(self._address, Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="dcgm-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> DcgmExporter:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

"""Reads the NVIDIA DCGM exporter's Prometheus text into a :class:`~bot.domain.health.GpuSnapshot`.

dcgm-exporter exposes one series per GPU (labels ``gpu``, ``UUID``, ``modelName``, ``Hostname``…) under the
``DCGM_FI_*`` field names: utilisation (``DCGM_FI_DEV_GPU_UTIL``, percent), frame-buffer memory used and
free (``DCGM_FI_DEV_FB_USED``/``_FREE``, MiB), power (``DCGM_FI_DEV_POWER_USAGE``, W), the last XID error code
(``DCGM_FI_DEV_XID_ERRORS``, a gauge: 0 until one happens) and the NVLink error counters
(``DCGM_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL``, summed per GPU). A field the
exporter's counter list leaves out is ``None``.

:class:`HttpGpuTelemetry` keeps one httpx client for every scrape (made on first use, safe across the watch's
threads, closed only by :meth:`HttpGpuTelemetry.close` at process end) and reads through the endpoint
client's :func:`~bot.adapters.endpoint.metrics.fetch_text`, so both scrapes fail in the same words.
"""

from __future__ import annotations

import math
from collections import defaultdict

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bot.adapters.endpoint.kept import KeptClient
from bot.adapters.endpoint.metrics import fetch_text
from bot.adapters.endpoint.tls import tls_context
from bot.domain.health import GpuReading, GpuSnapshot

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
NVLINK = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
FIELDS = {UTIL: "utilisation", FB_USED: "memory_used_mib", FB_FREE: "memory_free_mib", POWER: "power_watts", XID: "xid"}


class GpuTelemetryUnavailable(Exception):
    """The exporter could not be read or parsed; the message says why in one line."""


def parse_dcgm(text: str) -> GpuSnapshot:
    values: dict[str, dict[str, float]] = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isnan(sample.value):
                    continue
                gpu = sample.labels.get("gpu") or sample.labels.get("UUID") or "?"
                if (field := FIELDS.get(sample.name)) is not None:
                    values[gpu][field] = float(sample.value)
                elif sample.name in NVLINK or sample.name.removesuffix("_total") in NVLINK:
                    values[gpu]["nvlink_errors"] = values[gpu].get("nvlink_errors", 0.0) + float(sample.value)
    except ValueError as exc:
        raise GpuTelemetryUnavailable(f"DCGM metrics are not Prometheus text: {str(exc).splitlines()[0][:200]}") from None
    readings = []
    for gpu, fields in sorted(values.items(), key=lambda item: (len(item[0]), item[0])):
        xid = fields.pop("xid", None)
        readings.append(GpuReading(gpu=gpu, xid=int(xid) if xid is not None else None, **fields))
    return GpuSnapshot(tuple(readings))


class HttpGpuTelemetry:
    """Implements :class:`bot.services.ports.GpuTelemetry` over one shared httpx client."""

    def __init__(self, *, timeout: float = 5.0, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout = timeout
        self._kept = KeptClient(lambda: httpx.Client(timeout=timeout, transport=transport, verify=tls_context()))

    def close(self) -> None:
        """Close the shared client (process end); the next read makes a new one."""
        self._kept.close()

    def read(self, url: str) -> GpuSnapshot:
        return parse_dcgm(fetch_text(self._kept.get(), url, GpuTelemetryUnavailable))

"""``release build`` against moto's S3 over HTTP, ``release diff``, and malformed manifests that must store nothing."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bot.adapters.aws.artifacts import S3EcrArtifactVerifier, S3Objects
from bot.cli.main import app
from bot.domain.release import ReleaseManifest
from bot.domain.release_diff import diff_releases as diff_tuples
from bot.domain.release_diff import group_args, render_diff
from bot.sandbox import MotoStandIn
from bot.sandbox.aws import seed_image
from bot.sandbox.governance import governance_records
from bot.services.artifact_gate import run_artifact_checks
from bot.services.context import Context
from bot.services.errors import NotFound, Refused, ValidationFailed
from bot.services.release_build import (
    BuildRequest,
    build_manifest,
    manifest_yaml,
    read_serving_file,
    s3_store,
    write_manifest,
)
from bot.services.releases import diff_releases, list_releases, register_release
from tests.artifact_support import ENDPOINT, NOW, POLICY, example_manifest, not_passing
from tests.conftest import EXAMPLE_RELEASE

BUCKET = "acme-model-weights"
PREFIX = "kimi-k3/3f7c2a9e41d0b85c6a1e9f2d47b03c58e6a9d114/"
COMMIT = "3f7c2a9e41d0b85c6a1e9f2d47b03c58e6a9d114"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-openai@sha256:" + "4e" * 32
LICENCE_URI = f"s3://{BUCKET}/licences/kimi-k3-license.txt"
FILES = {
    "config.json": b'{"architectures": ["KimiK3ForCausalLM"]}',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 2048,
    "model-00002-of-00002.safetensors": b"\x01\x02" * 70_000,
}
LICENCE = b"Kimi K3 licence text\n"


def _upload(s3: Any) -> None:
    s3.create_bucket(Bucket=BUCKET)
    for key, body in FILES.items():
        extra = {"ChecksumAlgorithm": "SHA256"} if key.endswith("00001-of-00002.safetensors") else {}
        s3.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=body, **extra)
    s3.put_object(Bucket=BUCKET, Key="licences/kimi-k3-license.txt", Body=LICENCE)


def _request(**changes: Any) -> BuildRequest:
    fields: dict[str, Any] = dict(
        weights=f"s3://{BUCKET}/{PREFIX}", image=IMAGE, model_repo="moonshotai/Kimi-K3", model_commit=COMMIT,
        licence_version="kimi-k3-license-2026-07-27", licence=LICENCE_URI, trust_remote_code_exception="SEC-EXC-2026-0142",
    )
    fields.update(changes)
    return BuildRequest(**fields)


@pytest.fixture()
def s3(moto: MotoStandIn) -> Any:
    client = moto.client("s3")
    _upload(client)
    return client


# --- build -------------------------------------------------------------------------------------------------------


def test_build_reads_checksums_or_streams_and_the_result_registers(s3: Any, ctx: Context, tmp_path: Path) -> None:
    progress: list[tuple[str, int, int]] = []
    manifest = build_manifest(_request(), S3Objects(s3), progress=lambda *a: progress.append(a))
    assert manifest.name == "kimi-k3-3f7c2a9e41d0"
    assert [(o.key, o.size, o.sha256) for o in manifest.weights.objects] == sorted(
        (k, len(v), hashlib.sha256(v).hexdigest()) for k, v in FILES.items()
    )
    assert manifest.licence.sha256 == hashlib.sha256(LICENCE).hexdigest()
    # The shard uploaded with a SHA-256 checksum is not downloaded; the others (and the licence) are streamed.
    streamed = {key for key, _, _ in progress}
    assert streamed == {PREFIX + "config.json", PREFIX + "model-00002-of-00002.safetensors", "licences/kimi-k3-license.txt"}
    # The guide's launch by default: its args (model positional, all eight GPUs, a context within the ceiling), its env.
    args = manifest.serving.args
    assert args[0] == "/opt/ml/model" and "--model" not in args
    assert args[args.index("--tensor-parallel-size") + 1] == "8" and args[args.index("--max-model-len") + 1] == "262144"
    assert manifest.serving.env == {"VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION": "1"}

    target = tmp_path / "out" / "release.yaml"
    write_manifest(manifest, target)
    assert [p.name for p in target.parent.iterdir()] == ["release.yaml"]  # no temporary file left behind
    registered = register_release(ctx, yaml.safe_load(target.read_text()), actor="U1")
    assert registered.release.manifest == manifest


def test_multipart_composite_checksum_is_not_taken_for_the_object_sha256(s3: Any) -> None:
    parts = [b"a" * (5 * 1024 * 1024), b"tail"]
    key = PREFIX + "model-00002-of-00002.safetensors"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key, ChecksumAlgorithm="SHA256")
    done = []
    for number, body in enumerate(parts, 1):
        part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], PartNumber=number, Body=body,
                              ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": number, "ETag": part["ETag"], "ChecksumSHA256": part["ChecksumSHA256"]})
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": done})

    manifest = build_manifest(_request(), S3Objects(s3))
    shard = next(o for o in manifest.weights.objects if o.key == "model-00002-of-00002.safetensors")
    assert shard.sha256 == hashlib.sha256(b"".join(parts)).hexdigest()


def test_build_refuses_bad_fields_before_reading_anything() -> None:
    class Untouchable:
        def list_prefix(self, bucket: str, prefix: str) -> list:
            raise AssertionError("S3 must not be read when the request is invalid")

        def sha256(self, *args: Any, **kwargs: Any) -> str | None:
            raise AssertionError("S3 must not be read when the request is invalid")

    with pytest.raises(ValidationFailed) as caught:
        build_manifest(_request(model_commit="3f7c2a9", image="vllm/vllm-openai:kimi-k3"), Untouchable())  # type: ignore[arg-type]
    assert {p.split(":")[0] for p in caught.value.problems} == {"model.commit", "image"}


def test_empty_prefix_and_missing_licence_are_reported(s3: Any) -> None:
    with pytest.raises(ValidationFailed, match="no objects under"):
        build_manifest(_request(weights=f"s3://{BUCKET}/nothing-here/"), S3Objects(s3))
    with pytest.raises(ValidationFailed, match="licence: no object at"):
        build_manifest(_request(licence=f"s3://{BUCKET}/licences/missing.txt"), S3Objects(s3))


@pytest.mark.own_moto
def test_s3_dying_mid_build_writes_nothing(moto: MotoStandIn, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stop_after_first_chunk(key: str, done: int, total: int) -> None:
        moto.stop()

    with pytest.raises(Refused, match=r"could not read from S3.*nothing was written"):
        build_manifest(_request(), S3Objects(s3), progress=stop_after_first_chunk)

    # The CLI path: the same outage means no manifest file.
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    out = tmp_path / "never.yaml"
    result = CliRunner().invoke(app, _build_argv(out))
    assert result.exit_code == 1 and "could not read from S3" in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _build_argv(out: Path, *extra: str) -> list[str]:
    return [
        "release", "build", "--weights", f"s3://{BUCKET}/{PREFIX}", "--image", IMAGE, "--model-repo", "moonshotai/Kimi-K3",
        "--model-commit", COMMIT, "--licence-version", "kimi-k3-license-2026-07-27", "--licence", LICENCE_URI,
        "--trust-remote-code-exception", "SEC-EXC-2026-0142", "--out", str(out), *extra,
    ]


def test_cli_build_with_a_serving_args_file(moto: MotoStandIn, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    serving = tmp_path / "serving.yaml"
    serving.write_text(yaml.safe_dump({"args": ["--served-model-name", "Kimi-K3", "--tensor-parallel-size", 8],
                                       "env": {"VLLM_LOGGING_LEVEL": "INFO"}}))
    out = tmp_path / "built.yaml"
    result = CliRunner().invoke(app, _build_argv(out, "--serving-args", str(serving), "--name", "kimi-k3-candidate"))
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "3 objects" in result.output
    built = ReleaseManifest.model_validate(yaml.safe_load(out.read_text()))
    assert built.name == "kimi-k3-candidate"
    assert built.serving.args == ["--served-model-name", "Kimi-K3", "--tensor-parallel-size", "8"]
    assert built.serving.env == {"VLLM_LOGGING_LEVEL": "INFO"}


def test_the_old_dash_o_file_form_is_refused_with_a_pointer_to_out(tmp_path: Path) -> None:
    for old in ("-o", "--output"):
        out = tmp_path / "built.yaml"
        argv = _build_argv(out)
        argv[argv.index("--out")] = old
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert f"--out FILE (e.g. --out {out})" in result.output and "-o is the output format" in result.output
        assert not out.exists()  # nothing was built


def test_serving_args_file_must_be_a_list_or_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "serving.yaml"
    bad.write_text("just a string\n")
    with pytest.raises(ValidationFailed, match="expected a list of args"):
        read_serving_file(bad)
    with pytest.raises(ValidationFailed, match="no such file"):
        read_serving_file(tmp_path / "missing.yaml")


def test_default_client_follows_aws_endpoint_url(moto: MotoStandIn, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert len(build_manifest(_request(), s3_store("us-east-1")).weights.objects) == 3


# --- diff --------------------------------------------------------------------------------------------------------


def _variant(base: ReleaseManifest, **changes: Any) -> ReleaseManifest:
    data = base.model_dump(mode="json")
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return ReleaseManifest.model_validate(data)


def test_flag_value_pairs_count_as_one_arg() -> None:
    args = ["--model", "/opt/ml/model", "--trust-remote-code", "--seed", "-1", "--max-model-len=131072", "serve"]
    assert group_args(args) == [
        ("--model", "/opt/ml/model"), ("--trust-remote-code", None), ("--seed", "-1"), ("--max-model-len", "131072"),
        ("serve", None),
    ]


def test_diff_reports_args_env_objects_and_fields() -> None:
    a = example_manifest()
    args = [x for x in a.serving.args if x != "--enable-prefix-caching"]
    args[args.index("--tensor-parallel-size") + 1] = "4"
    objects = [o.model_dump() for o in a.weights.objects][:-1]
    objects[0]["sha256"] = "0" * 64
    objects.append({"key": "generation_config.json", "size": 120, "sha256": "1" * 64})
    b = _variant(
        a, name="kimi-k3-2026-09-01", image=a.image[:-4] + "ffff", model__commit="a" * 40,
        serving__args=[*args, "--max-num-batched-tokens", "8192"],
        serving__env={"VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION": "0", "HF_TOKEN": "hf_" + "z" * 34},
        weights__objects=objects,
    )
    d = diff_tuples(a, b)
    assert [c.field for c in d.fields] == ["model.commit", "image"]
    assert d.args_added == ["--max-num-batched-tokens 8192"] and d.args_removed == ["--enable-prefix-caching"]
    assert [(c.field, c.before, c.after) for c in d.args_changed] == [("--tensor-parallel-size", "8", "4")]
    assert d.objects_added == ["generation_config.json"] and d.objects_removed == ["model-00002-of-00064.safetensors"]
    assert [o.key for o in d.objects_changed] == ["config.json"]
    text = render_diff(d)
    assert "~ --tensor-parallel-size: 8 → 4" in text and "+ HF_TOKEN=***" in text
    assert "hf_zzzz" not in text  # secret values are masked in diffs
    assert "~ VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION: 1 → 0" in text


def test_identical_tuples_and_reordered_flags() -> None:
    a = example_manifest()
    assert diff_tuples(a, _variant(a, name="twin")).identical
    args = list(a.serving.args)
    i = args.index("--served-model-name")
    moved = args[i : i + 2]
    del args[i : i + 2]
    reordered = diff_tuples(a, _variant(a, name="reordered", serving__args=moved + args))
    assert not reordered.identical and reordered.args_reordered
    assert render_diff(reordered).endswith("~ same args in a different order")


def test_diff_service_and_cli(ctx: Context, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = example_manifest()
    b = _variant(a, name="kimi-k3-2026-09-01", licence__version="kimi-k3-license-2026-09-01")
    for m in (a, b):
        register_release(ctx, m.model_dump(mode="json"), actor="U1")
    assert [c.field for c in diff_releases(ctx, a.name, b.name).fields] == ["licence.version"]
    with pytest.raises(NotFound):
        diff_releases(ctx, a.name, "nope")

    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    monkeypatch.setenv("KIMI_DATABASE_URL", db_url)
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "data"))
    result = CliRunner().invoke(app, ["release", "diff", a.name, b.name])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "kimi-k3-2026-08-01 → kimi-k3-2026-09-01\n"
        "fields:\n"
        "  ~ licence.version: kimi-k3-license-2026-07-27 → kimi-k3-license-2026-09-01"
    )


# --- malformed manifests store nothing ------------------------------------------------------------------------------

VALID = yaml.safe_load(EXAMPLE_RELEASE.read_text())
JUNK = st.one_of(st.none(), st.integers(), st.text(max_size=12), st.lists(st.integers(), max_size=2), st.booleans())


def _set(data: dict, path: tuple[str, ...], value: Any) -> dict:
    data = copy.deepcopy(data)
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return data


def _drop(data: dict, path: tuple[str, ...]) -> dict:
    data = copy.deepcopy(data)
    node = data
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    return data


REQUIRED = [("name",), ("model",), ("model", "commit"), ("weights",), ("weights", "prefix"), ("image",), ("serving",),
            ("serving", "args"), ("licence",), ("licence", "sha256")]
malformed = st.one_of(
    st.sampled_from(REQUIRED).map(lambda p: _drop(VALID, p)),
    st.text(alphabet="0123456789abcdefg", min_size=1, max_size=39).map(lambda c: _set(VALID, ("model", "commit"), c)),
    st.from_regex(r"[a-z]{3,10}/[a-z-]{3,10}:[a-z0-9.]{1,8}", fullmatch=True).map(lambda i: _set(VALID, ("image",), i)),
    st.text(max_size=63).filter(lambda s: len(s) != 64).map(lambda h: _set(VALID, ("licence", "sha256"), h)),
    st.from_regex(r"(https?://|s3:/)?[a-z]{3,8}/[a-z]{1,8}", fullmatch=True).map(lambda p: _set(VALID, ("weights", "prefix"), p)),
    st.just(_set(VALID, ("weights", "objects"), [])),
    st.just(_set(VALID, ("weights", "objects"), VALID["weights"]["objects"] + VALID["weights"]["objects"][:1])),
    st.integers(max_value=-1).map(lambda n: _set(VALID, ("weights", "objects"), [{**VALID["weights"]["objects"][0], "size": n}])),
    st.text(min_size=1, max_size=10).filter(lambda k: k not in VALID).map(lambda k: {**VALID, k: "surprise"}),
    st.sampled_from(["model", "weights", "serving", "licence"]).flatmap(lambda f: JUNK.map(lambda j: _set(VALID, (f,), j))),
    st.from_regex(r"[A-Z _!]{1,20}", fullmatch=True).map(lambda n: _set(VALID, ("name",), n)),
    JUNK,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=malformed)
def test_malformed_manifests_are_refused_and_store_nothing(ctx: Context, data: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        register_release(ctx, data, actor="U1")
    assert caught.value.problems and all(": " in p for p in caught.value.problems)
    assert list_releases(ctx) == []
    with ctx.uow() as uow:
        assert list(uow.audit.list(limit=10)) == []


def test_example_manifest_registers_cleanly(ctx: Context) -> None:
    result = register_release(ctx, copy.deepcopy(VALID), actor="U1")
    assert result.warnings == [] and result.release.name == "kimi-k3-2026-08-01"
    assert manifest_yaml(result.release.manifest).startswith("name: kimi-k3-2026-08-01\n")


def test_build_then_verify_end_to_end(moto: MotoStandIn, s3: Any) -> None:
    ecr = moto.client("ecr")
    seed_image(ecr, IMAGE)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    provenance = {"base_image": "nvcr.io/nvidia/cuda@sha256:" + "a" * 64, "cuda": "12.9.1", "driver": ">=575.57",
                  "vllm_commit": "b" * 40}
    manifest = build_manifest(_request(provenance=provenance), S3Objects(s3))
    reviews, exceptions = governance_records([manifest], [ENDPOINT], NOW)
    policy = replace(POLICY, licence_reviews=tuple(reviews), exceptions=tuple(exceptions), now=NOW)
    checks = run_artifact_checks(S3EcrArtifactVerifier(s3, ecr), manifest, policy).checks
    # The bucket was created bare: its missing protections are what the gate reports, nothing else.
    assert not_passing(checks) == {
        "bucket.public_access_block": "fail", "bucket.encryption": "fail", "bucket.logging": "fail", "bucket.policy": "fail",
    }

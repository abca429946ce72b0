"""Prompts in the SPEED-Bench schema: a loader for user files (JSONL or parquet), the built-in
sample, held-out code prompts for the demo pair, and chat templating.

Schema (one row per question, the columns of the ``nvidia/SPEED-Bench`` dataset)::

    question_id   str | int        unique id of the question
    category      str              one of the 11 categories (coding, math, ...), or any label
    sub_category  str | None
    turns         list[str]        user turns, >= 1; a multi-turn row is answered turn by turn
    source        str | None       where the question comes from
    src_id        str | int | None id in that source
    difficulty    str | int | float | None
    multiturn     bool

Configs: ``qualitative`` (11 categories x 80 prompts upstream) and ``throughput_<N>k``
(``throughput_1k`` ... ``throughput_32k``, prompts of about N thousand tokens). A config is
looked up inside a directory laid out like the upstream dataset
(``<dir>/<config>/*.parquet``, ``<dir>/<config>.parquet`` or ``<dir>/<config>.jsonl``).

Every malformed input raises :class:`DatasetError`, whose message names the file, the row
(parquet, 0-based) or line (JSONL, 1-based) and the field.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from trtspec import jsonl

CATEGORIES: tuple[str, ...] = (
    "coding", "math", "humanities", "stem", "writing", "summarization",
    "roleplay", "rag", "multilingual", "reasoning", "qa",
)
FIELDS: tuple[str, ...] = (
    "question_id", "category", "sub_category", "turns", "source", "src_id", "difficulty", "multiturn",
)
CONFIG_RE = re.compile(r"^(qualitative|throughput_[0-9]+k)$")
SAMPLE_PATH = Path(__file__).with_name("data") / "sample.jsonl"
BUILTIN_NAMES = ("builtin", "sample")
#: Source label of the code prompts cut from held-out standard-library files.
STDLIB_SOURCE = "python-stdlib-heldout"


class DatasetError(ValueError):
    """A prompt file that does not follow the SPEED-Bench schema (message names row/line and field)."""


@dataclass(frozen=True)
class Prompt:
    """One SPEED-Bench question. ``turns`` holds the user turns in order (at least one)."""

    question_id: str
    category: str
    sub_category: str
    turns: tuple[str, ...]
    source: str
    src_id: str
    difficulty: str
    multiturn: bool

    def __post_init__(self) -> None:
        if not self.category:
            raise DatasetError(f"question {self.question_id!r}: field 'category' must be a non-empty string")
        if not self.turns or not all(isinstance(t, str) for t in self.turns):
            raise DatasetError(f"question {self.question_id!r}: field 'turns' must be a non-empty list of str")

    def to_row(self) -> dict[str, Any]:
        """The row as written to JSONL/parquet (``turns`` as a list)."""
        return {
            "question_id": self.question_id, "category": self.category, "sub_category": self.sub_category,
            "turns": list(self.turns), "source": self.source, "src_id": self.src_id,
            "difficulty": self.difficulty, "multiturn": self.multiturn,
        }


def _type_name(value: Any) -> str:
    return type(value).__name__


def row_to_prompt(row: Any, where: str) -> Prompt:
    """Validate one decoded row (``where`` is e.g. ``"file.jsonl line 3"``) and build a Prompt."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected an object with fields {list(FIELDS)}, got {_type_name(row)}")
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise DatasetError(f"{where}: missing field {missing[0]!r} (required: {', '.join(FIELDS)})")

    def text(field: str, value: Any, *, allow_none: bool, allow_int: bool = False, allow_float: bool = False) -> str:
        ok: tuple[type, ...] = (str,) + ((int,) if allow_int else ()) + ((float,) if allow_float else ())
        if value is None and allow_none:
            return ""
        if isinstance(value, bool) or not isinstance(value, ok):
            want = " or ".join(t.__name__ for t in ok) + (" or null" if allow_none else "")
            raise DatasetError(f"{where}: field {field!r} must be {want}, got {_type_name(value)} {value!r:.60}")
        return str(value)

    qid = text("question_id", row["question_id"], allow_none=False, allow_int=True)
    category = text("category", row["category"], allow_none=False)
    if not category.strip():
        raise DatasetError(f"{where}: field 'category' must be a non-empty string")
    turns = row["turns"]
    if hasattr(turns, "tolist"):  # numpy arrays from some parquet readers
        turns = turns.tolist()
    if not isinstance(turns, (list, tuple)):
        raise DatasetError(f"{where}: field 'turns' must be a list of str, got {_type_name(turns)}")
    if not turns:
        raise DatasetError(f"{where}: field 'turns' must hold at least one turn, got an empty list")
    for i, turn in enumerate(turns):
        if not isinstance(turn, str):
            raise DatasetError(f"{where}: field 'turns' item {i} must be str, got {_type_name(turn)}")
    multiturn = row["multiturn"]
    if not isinstance(multiturn, bool):
        raise DatasetError(f"{where}: field 'multiturn' must be bool, got {_type_name(multiturn)} {multiturn!r:.30}")
    return Prompt(
        question_id=qid,
        category=category,
        sub_category=text("sub_category", row["sub_category"], allow_none=True),
        turns=tuple(turns),
        source=text("source", row["source"], allow_none=True),
        src_id=text("src_id", row["src_id"], allow_none=True, allow_int=True),
        difficulty=text("difficulty", row["difficulty"], allow_none=True, allow_int=True, allow_float=True),
        multiturn=multiturn,
    )


def read_jsonl(path: str | Path) -> list[Prompt]:
    """Read a JSONL file of SPEED-Bench rows (blank lines skipped; line numbers are 1-based)."""
    path = Path(path)
    try:
        prompts = [row_to_prompt(row, f"{path} line {lineno}") for lineno, row in jsonl.read_jsonl(path)]
    except jsonl.JsonlError as exc:
        raise DatasetError(f"{path} {exc}") from None
    if not prompts:
        raise DatasetError(f"{path}: empty file (no rows); expected JSONL rows with fields {', '.join(FIELDS)}")
    return prompts


def read_parquet(path: str | Path) -> list[Prompt]:
    """Read a parquet file of SPEED-Bench rows (row numbers are 0-based)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.stat().st_size == 0:
        raise DatasetError(f"{path}: empty file; expected a parquet table with columns {', '.join(FIELDS)}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None
    missing = [f for f in FIELDS if f not in table.column_names]
    if missing:
        raise DatasetError(f"{path}: missing field {missing[0]!r} (column absent; has {table.column_names})")
    if table.num_rows == 0:
        raise DatasetError(f"{path}: empty table (no rows)")
    return [row_to_prompt(row, f"{path} row {i}") for i, row in enumerate(table.select(list(FIELDS)).to_pylist())]


def write_jsonl(prompts: Iterable[Prompt], path: str | Path) -> Path:
    """Write prompts as JSONL (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps(p.to_row(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def write_parquet(prompts: Iterable[Prompt], path: str | Path) -> Path:
    """Write prompts as a parquet table with the SPEED-Bench columns (temp file, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    rows = [p.to_row() for p in prompts]
    schema = pa.schema([
        ("question_id", pa.string()), ("category", pa.string()), ("sub_category", pa.string()),
        ("turns", pa.list_(pa.string())), ("source", pa.string()), ("src_id", pa.string()),
        ("difficulty", pa.string()), ("multiturn", pa.bool_()),
    ])
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    tmp.replace(path)
    return path


def _config_files(root: Path, config: str) -> list[Path]:
    candidates = [
        sorted((root / config).glob("*.parquet")),
        sorted((root / config).glob("*.jsonl")),
        sorted((root / "data").glob(f"{config}-*.parquet")),
        [p for p in (root / f"{config}.parquet", root / f"{config}.jsonl") if p.is_file()],
    ]
    for files in candidates:
        if files:
            return files
    return []


def load_prompts(
    source: str | Path,
    *,
    config: str = "qualitative",
    categories: Sequence[str] | None = None,
    limit_per_category: int | None = None,
    code_prompts: int = 0,
) -> list[Prompt]:
    """Load SPEED-Bench prompts.

    ``source``: ``"builtin"`` (the project's sample, see :func:`builtin_sample`), a ``.jsonl`` /
    ``.parquet`` file, or a directory holding ``config`` (default ``"qualitative"``; or
    ``throughput_<N>k``). ``categories`` keeps only those categories (in file order);
    ``limit_per_category`` keeps the first N of each; ``code_prompts`` (builtin only) adds that
    many held-out standard-library code prompts to the ``coding`` category.
    """
    if not CONFIG_RE.match(config):
        raise DatasetError(f"config={config!r}: expected 'qualitative' or 'throughput_<N>k' (e.g. throughput_1k)")
    if limit_per_category is not None and limit_per_category < 1:
        raise DatasetError(f"limit_per_category={limit_per_category}: expected a positive integer or None")
    if str(source) in BUILTIN_NAMES:
        prompts = builtin_sample(code_prompts=code_prompts)
    else:
        path = Path(source)
        if not path.exists():
            raise DatasetError(f"source={str(source)!r}: no such file or directory (or use 'builtin')")
        if path.is_dir():
            files = _config_files(path, config)
            if not files:
                raise DatasetError(
                    f"source={str(path)!r}: no files for config {config!r} (looked for {config}/*.parquet, "
                    f"{config}/*.jsonl, data/{config}-*.parquet, {config}.parquet, {config}.jsonl)"
                )
        else:
            files = [path]
        prompts = []
        for f in files:
            if f.suffix == ".parquet":
                prompts.extend(read_parquet(f))
            elif f.suffix in (".jsonl", ".json"):
                prompts.extend(read_jsonl(f))
            else:
                raise DatasetError(f"source={str(f)!r}: unknown file type {f.suffix!r}; expected .jsonl or .parquet")
    if categories:
        wanted = set(categories)
        unknown = wanted - {p.category for p in prompts}
        if unknown:
            raise DatasetError(f"categories={sorted(unknown)}: not present in {source} "
                               f"(has {sorted({p.category for p in prompts})})")
        prompts = [p for p in prompts if p.category in wanted]
    if limit_per_category is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= limit_per_category:
                kept.append(p)
        prompts = kept
    return prompts


# ----------------------------------------------------------------------------------------------
# built-in sample and held-out code prompts


def builtin_sample(*, code_prompts: int = 0) -> list[Prompt]:
    """The project's sample: >= 5 hand-written prompts for each of the 11 categories
    (``trtspec/bench/data/sample.jsonl``), plus ``code_prompts`` prompts cut from held-out
    standard-library files (see :func:`stdlib_code_prompts`)."""
    prompts = read_jsonl(SAMPLE_PATH)
    if code_prompts:
        prompts.extend(stdlib_code_prompts(code_prompts))
    return prompts


def heldout_files() -> list[Path]:
    """Standard-library files held out from the demo pair's training, sorted.

    In order of preference: ``trtspec.zoo.data.heldout_files()``; else the zoo's own split rule
    (``trtspec.zoo.data.list_stdlib_files()`` filtered by ``trtspec.zoo.data.is_heldout``); else,
    without the zoo, the top-level ``*.py`` files of this interpreter's standard library
    (``sysconfig`` path ``stdlib``) whose file name's SHA-256 starts with a byte below 32 (a fixed,
    name-determined 1/8 of the library).
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    try:
        from trtspec.zoo import data as zoo_data
    except ImportError:
        zoo_data = None
    if zoo_data is not None and hasattr(zoo_data, "heldout_files"):
        return sorted(Path(p) for p in zoo_data.heldout_files())
    if zoo_data is not None and hasattr(zoo_data, "is_heldout") and hasattr(zoo_data, "list_stdlib_files"):
        root = Path(zoo_data.stdlib_root()) if hasattr(zoo_data, "stdlib_root") else stdlib
        return [root / rel for rel in zoo_data.list_stdlib_files(root) if zoo_data.is_heldout(rel)]
    return sorted(p for p in stdlib.glob("*.py") if hashlib.sha256(p.name.encode()).digest()[0] < 32)


def _rel(path: Path) -> str:
    try:
        return path.relative_to(Path(sysconfig.get_paths()["stdlib"])).as_posix()
    except ValueError:
        return path.name


def _code_prompts_from_file(path: Path, context_lines: int) -> list[Prompt]:
    rel = _rel(path)
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return []
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(node.body) < 3:
            continue
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None), ast.Constant)
                and isinstance(doc.value.value, str)):
            continue
        start = max(0, (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1 - context_lines)
        text = "\n".join(lines[start:doc.end_lineno]) + "\n"
        out.append(Prompt(
            question_id=f"stdlib-{rel}-{node.name}", category="coding", sub_category="stdlib_completion",
            turns=(text,), source=STDLIB_SOURCE, src_id=f"{rel}:{node.lineno}", difficulty="",
            multiturn=False,
        ))
    return out


def stdlib_code_prompts(n: int, *, context_lines: int = 12, per_file: int = 2) -> list[Prompt]:
    """``n`` code-completion prompts from :func:`heldout_files`: each is the ``context_lines``
    lines before a documented top-level function plus its signature and docstring (the model
    writes the body). At most ``per_file`` per file, files in sorted order, functions in file order."""
    if n < 0:
        raise DatasetError(f"code_prompts={n}: expected >= 0")
    out: list[Prompt] = []
    for path in heldout_files():
        if len(out) >= n:
            break
        out.extend(_code_prompts_from_file(Path(path), context_lines)[:per_file])
    return out[:n]


# ----------------------------------------------------------------------------------------------
# chat templating


class ChatTemplate:
    """A Jinja chat template read from a model directory, with the HF ``apply_chat_template``
    call shape (text only). Used when the runtime's tokenizer is a plain ``tokenizers.Tokenizer``."""

    def __init__(self, template: str, **specials: str):
        self.chat_template = template
        self._specials = specials

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        if tokenize:
            raise ValueError("tokenize=True: ChatTemplate renders text only; encode the result with the tokenizer")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self._specials)


def load_chat_template(model_dir: str | Path) -> ChatTemplate | None:
    """The chat template of an HF model directory (``chat_template.jinja`` or the
    ``chat_template`` field of ``tokenizer_config.json``), or None when it has none."""
    model_dir = Path(model_dir)
    jinja = model_dir / "chat_template.jinja"
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    template = jinja.read_text(encoding="utf-8") if jinja.is_file() else cfg.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not template:
        return None
    specials = {k: v for k, v in cfg.items() if k in ("bos_token", "eos_token") and isinstance(v, str)}
    return ChatTemplate(template, **specials)


def has_chat_template(tokenizer: Any) -> bool:
    """True when ``tokenizer`` (HF tokenizer or :class:`ChatTemplate`) carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None)) and hasattr(tokenizer, "apply_chat_template")


def render_turn(prompt: Prompt, turn: int, answers: Sequence[str] = (), tokenizer: Any = None) -> str:
    """The text sent for ``prompt.turns[turn]`` given the model's earlier ``answers``.

    With a ``tokenizer`` (HF tokenizer or :class:`ChatTemplate`) that has a chat template, the
    conversation (user/assistant messages) is rendered by it with the generation prompt added.
    Otherwise, and always for held-out code prompts (``source == STDLIB_SOURCE``, raw code
    completion), earlier turns and answers are joined by blank lines.
    """
    if not 0 <= turn < len(prompt.turns):
        raise IndexError(f"turn={turn}: question {prompt.question_id!r} has {len(prompt.turns)} turns")
    if len(answers) < turn:
        raise ValueError(f"answers: turn {turn} needs {turn} earlier answers, got {len(answers)}")
    messages: list[dict[str, str]] = []
    for i in range(turn + 1):
        messages.append({"role": "user", "content": prompt.turns[i]})
        if i < turn:
            messages.append({"role": "assistant", "content": answers[i]})
    if tokenizer is not None and has_chat_template(tokenizer) and prompt.source != STDLIB_SOURCE:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages)


def category_counts(prompts: Iterable[Prompt]) -> dict[str, int]:
    """Number of prompts per category, in first-seen order."""
    counts: dict[str, int] = {}
    for p in prompts:
        counts[p.category] = counts.get(p.category, 0) + 1
    return counts


def _main(argv: Sequence[str]) -> int:  # pragma: no cover - debugging aid
    prompts = load_prompts(argv[0] if argv else "builtin", code_prompts=8)
    print(json.dumps(category_counts(prompts)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))

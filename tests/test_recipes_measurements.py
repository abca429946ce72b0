"""The calibration corpus (recipes/measurements/*.yaml): loader errors, and invariants of the shipped data."""
import hashlib
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from trtspec.recipes.measurements import (
    MeasurementError,
    load_measurements,
    measurement_files,
    split_for,
    split_unit,
    sweeps,
)

REPO = Path(__file__).resolve().parents[1]
GOOD_CASE = """\
  - id: {id}
    quote: "158.34 tokens/s ... 373.25 tokens/s"
    model: meta-llama/Llama-3.1-8B-Instruct
    gpu: {gpu}
    num_gpus: 1
    tp: 1
    quant: none
    engine: sglang
    drafter: eagle3
    batch: 1
    batch_kind: batch
    draft_len: 3
    al: {al}
    baseline_tokens_per_s: 158.34
    spec_tokens_per_s: 373.25
    speedup: {speedup}
    metric: output_tps_total
    split: {split}
"""


def _write(tmp_path, name, cases, source="https://example.org/post"):
    path = tmp_path / name
    path.write_text(f"source: {source}\ntitle: t\npublished: 2025-03-01\ncases:\n{cases}", encoding="utf-8")
    return path


def _case(**kw):
    fields = dict(id="c1", gpu="h100", al=3.2, speedup=2.36, split="train")
    fields.update(kw)
    return GOOD_CASE.format(**fields)


@pytest.fixture(scope="module")
def corpus():
    return load_measurements()


def test_a_good_file_loads_and_the_loader_computes_the_speedup(tmp_path):
    path = _write(tmp_path, "a.yaml", _case(speedup="null"))
    (m,) = load_measurements([path])
    assert m.speedup == pytest.approx(373.25 / 158.34, abs=1e-4)
    assert m.source == "https://example.org/post" and str(m.published) == "2025-03-01"


@pytest.mark.parametrize("kw, field, words", [
    (dict(gpu="h800"), "gpu", "unknown GPU 'h800'"),
    (dict(speedup=2.6), "speedup", "disagrees with spec/baseline"),
    (dict(al=4.5), "al", "exceeds draft_len + 1"),
    (dict(split="test"), "split", "'train' or 'heldout'"),
    (dict(id="Bad Id"), "id", "lower-case"),
])
def test_errors_name_the_file_the_case_and_the_field(tmp_path, kw, field, words):
    path = _write(tmp_path, "bad.yaml", _case(**kw))
    with pytest.raises(MeasurementError) as err:
        load_measurements([path])
    msg = str(err.value)
    assert str(path) in msg and f"field '{field}'" in msg and words in msg
    assert f"case {kw.get('id', 'c1')!r}" in msg


def test_a_missing_required_field_is_named(tmp_path):
    path = _write(tmp_path, "bad.yaml", _case().replace("    model: meta-llama/Llama-3.1-8B-Instruct\n", ""))
    with pytest.raises(MeasurementError, match=r"bad\.yaml: case 'c1': field 'model': Field required"):
        load_measurements([path])


def test_an_unknown_field_is_refused(tmp_path):
    path = _write(tmp_path, "bad.yaml", _case() + "    colour: blue\n")
    with pytest.raises(MeasurementError, match=r"case 'c1': field 'colour': Extra inputs are not permitted"):
        load_measurements([path])


def test_tpot_figures_give_the_speedup_and_must_match_the_metric(tmp_path):
    case = _case(speedup="null").replace("    baseline_tokens_per_s: 158.34\n    spec_tokens_per_s: 373.25\n",
                                          "    baseline_tpot_ms: 7.07\n    spec_tpot_ms: 4.05\n")
    (m,) = load_measurements([_write(tmp_path, "a.yaml", case.replace("output_tps_total", "tpot_ms"))])
    assert m.speedup == pytest.approx(7.07 / 4.05, abs=1e-4)
    with pytest.raises(MeasurementError, match="field 'metric': output_tps_total takes"):
        load_measurements([_write(tmp_path, "b.yaml", case)])


def test_a_case_needs_a_performance_figure(tmp_path):
    case = _case(speedup="null").replace("    baseline_tokens_per_s: 158.34\n    spec_tokens_per_s: 373.25\n", "")
    with pytest.raises(MeasurementError, match="field 'speedup': needs a performance figure"):
        load_measurements([_write(tmp_path, "a.yaml", case)])


def test_duplicate_ids_across_files_are_refused(tmp_path):
    a = _write(tmp_path, "a.yaml", _case(), source="https://example.org/a")
    b = _write(tmp_path, "b.yaml", _case(), source="https://example.org/b")
    with pytest.raises(MeasurementError, match=r"b\.yaml: case 'c1': field 'id': duplicate id, already used in .*a\.yaml"):
        load_measurements([a, b])


def test_one_sweep_cannot_straddle_the_split(tmp_path):
    path = _write(tmp_path, "a.yaml", _case(id="c1") + "    sweep: s1\n" + _case(id="c2", split="heldout") + "    sweep: s1\n")
    with pytest.raises(MeasurementError, match="case 'c2': field 'split': all cases of sweep 's1' must share a split"):
        load_measurements([path])


def test_a_sweep_id_cannot_span_two_sources(tmp_path):
    a = _write(tmp_path, "a.yaml", _case(id="c1") + "    sweep: s1\n", source="https://example.org/a")
    b = _write(tmp_path, "b.yaml", _case(id="c2") + "    sweep: s1\n", source="https://example.org/b")
    with pytest.raises(MeasurementError, match="case 'c2': field 'sweep': sweep 's1' is already used"):
        load_measurements([a, b])


def test_file_level_fields_are_checked(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("title: t\ncases: []\n", encoding="utf-8")
    with pytest.raises(MeasurementError, match=r"a\.yaml: field 'source' is required"):
        load_measurements([path])
    path.write_text("source: not a source\ntitle: t\ncases:\n" + _case(), encoding="utf-8")
    with pytest.raises(MeasurementError, match="field 'source': must be a URL, owner/repo#N or owner/repo@commit:path"):
        load_measurements([path])


def test_split_rule_hashes_the_sweep_or_the_lone_case():
    assert split_unit("owner/repo#1", "s1", "c1") == "owner/repo#1#s1"
    assert split_unit("owner/repo#1", None, "c1") == "owner/repo#1#c1"
    for unit in ("sgl-project/sglang#4716#llama33-70b-eagle3-tree-8xh100-sglang-b1", "x#y", "https://a.b/c#d"):
        want = "heldout" if int(hashlib.sha256(unit.encode()).hexdigest(), 16) % 3 == 0 else "train"
        assert split_for(unit) == want
    units = [f"https://example.org/{i}#s" for i in range(3000)]
    assert 0.30 < sum(split_for(u) == "heldout" for u in units) / len(units) < 0.37


# ---- the shipped corpus ----------------------------------------------------------------------------------------


def test_every_shipped_file_loads(corpus):
    files = measurement_files()
    assert files and len({m.source for m in corpus}) == len(files), "one file per source"
    assert Counter(m.id for m in corpus).most_common(1)[0][1] == 1


def test_the_rule_reproduces_the_stored_splits(corpus):
    wrong = [(m.id, m.split) for m in corpus if m.split != split_for(m.split_unit)]
    assert not wrong


def test_the_corpus_is_large_enough_and_about_a_third_of_its_units_is_held_out(corpus):
    """The split rule works on units (a sweep or a lone case), each held out with probability 1/3 by its hash: the
    unit fraction stays near a third; the case fraction moves with the size of the sweeps that fall on each side."""
    units = {m.split_unit: m.split for m in corpus}
    heldout_units = sum(split == "heldout" for split in units.values())
    assert len(corpus) >= 150 and len({m.source for m in corpus}) >= 30
    assert 0.25 <= heldout_units / len(units) <= 0.45
    assert sum(m.split == "heldout" for m in corpus) >= 0.2 * len(corpus)
    assert any(m.speedup is not None and m.speedup < 1.0 for m in corpus), "keep published losses"


def test_stored_speedups_agree_with_the_stored_figures(corpus):
    for m in corpus:
        if m.baseline_tokens_per_s and m.spec_tokens_per_s:
            assert m.speedup == pytest.approx(m.spec_tokens_per_s / m.baseline_tokens_per_s, rel=0.02), m.id
        if m.baseline_tpot_ms and m.spec_tpot_ms:
            assert m.speedup == pytest.approx(m.baseline_tpot_ms / m.spec_tpot_ms, rel=0.02), m.id


def test_every_case_is_sourced_and_physically_possible(corpus):
    for m in corpus:
        assert m.quote.strip() and m.source.strip(), m.id
        if m.al is not None and m.draft_len is not None:
            assert 1.0 <= m.al <= m.draft_len + 1, m.id
        if m.acceptance_curve and m.draft_len and len(m.acceptance_curve) >= m.draft_len and m.al is not None:
            assert m.acceptance_curve[m.draft_len - 1] == pytest.approx(m.al, abs=0.01), m.id


def test_sweeps_vary_only_draft_length_or_batch(corpus):
    for name, cases in sweeps(corpus).items():
        assert len(cases) >= 2, name
        fixed = {(m.model, m.gpu, m.num_gpus, m.tp, m.quant, m.engine, m.drafter, m.metric, m.dataset) for m in cases}
        assert len(fixed) == 1, name
        assert len({(m.draft_len, m.tree_nodes, m.topk, m.batch) for m in cases}) == len(cases), name


def test_the_readme_lists_every_source_file(corpus):
    readme = (REPO / "recipes" / "measurements" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in measurement_files() if p.name not in readme]
    assert not missing

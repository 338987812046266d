"""The registry of reported numbers (spectra_cli.registry): every number of every report kind is
known, labels are one per number, and every view reads the registry."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli import registry


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("kinds")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((900, 48)) * np.arange(1, 49) ** -0.6
    np.save(tmp / "a_step_1.npy", X)
    np.save(tmp / "a_step_2.npy", X[::-1].copy())
    np.save(tmp / "ctx.npy", rng.standard_normal((40, 8, 16)).astype(np.float32))
    W = (rng.standard_normal((96, 48)) / 7).astype(np.float32)
    docs: dict[str, dict] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        docs["fit everything"] = spectra.fit(
            X, window=["5:30", "3:20"], ci=True, ci_replicates=20, population=True, density=True, capacity=[0.1],
            counting=[0.01], shuffled_control=True, partition_isotropy=True, isoscore=True).to_dict()
        docs["fit broken"] = spectra.fit(X, model="broken", window="3:40").to_dict()
        docs["fit log-corrected"] = spectra.fit(X, model="log-corrected", window="3:40").to_dict()
        docs["weightwatcher"] = spectra.fit(W, convention="weightwatcher").to_dict()
        docs["spectrum top"] = spectra.spectrum(X, top=8).to_dict()
        wide = rng.standard_normal((900, 400)) * np.arange(1, 401) ** -0.8
        docs["fit top-k"] = spectra.fit(wide, top=20, window="3:15").to_dict()
        assert docs["fit top-k"]["rank"]["bounds"]
        docs["isotropy"] = spectra.isotropy(X).to_dict()
        docs["whiten"] = spectra.whiten(X, out=str(tmp / "w.npy")).to_dict()
        docs["sequence"] = spectra.sequence(str(tmp / "ctx.npy")).to_dict()
        docs["compare"] = spectra.compare(str(tmp / "a_step_1.npy"), str(tmp / "a_step_2.npy")).to_dict()
        res = spectra.batch([str(tmp / "a_step_1.npy"), str(tmp / "a_step_2.npy")], jsonl=str(tmp / "r.jsonl"))
        docs["batch line"] = res.results[0]
        docs["summary"] = res.summary()
        docs["trend"] = spectra.trend(str(tmp / "r.jsonl"), metric=["fit.alpha", "rank.participation_ratio"]).to_dict()
        docs["check"] = spectra.check(str(tmp / "a_step_1.npy"), require=["fit.alpha >= 0.1"]).to_dict()
        docs["check results"] = spectra.check(str(tmp / "r.jsonl"), require=["fit.alpha >= 0.1"]).to_dict()
    return docs


def test_every_number_of_every_report_kind_is_in_the_registry(documents: dict[str, dict]) -> None:
    unknown = {kind: registry.unknown_numbers(doc) for kind, doc in documents.items()}
    assert not {k: v for k, v in unknown.items() if v}


def test_a_number_the_registry_does_not_know_is_found() -> None:
    assert registry.unknown_numbers({"rank": {"participation_ratio": 3.0, "brand_new_rank": 2.0}}) == [
        "rank.brand_new_rank"]


def test_two_numbers_never_share_a_label_and_one_number_has_one() -> None:
    by_label: dict[str, set[str]] = {}
    for m in registry.METRICS:
        same = frozenset((m.path, *m.same_as))
        by_label.setdefault(re.sub(r"[\s_]+", " ", m.label.lower()), set()).add(min(same))
    shared = {label: paths for label, paths in by_label.items() if len(paths) > 1}
    assert not shared
    for m in registry.METRICS:  # an alias is the same number: the same label
        for other in m.same_as:
            assert registry.label(other) == m.label, (m.path, other)


def test_sub_reports_read_the_root_entries() -> None:
    assert registry.canonical("fits.2.alpha") == "fit.alpha"
    assert registry.canonical("models.models.broken.alpha_2") == "fit.alpha_2"
    assert registry.canonical("context.rank.participation_ratio") == "rank.participation_ratio"
    assert registry.canonical("whitening.isotropy_after.mean_cosine") == "isotropy.mean_cosine"
    assert registry.get("controls.shuffled.fits.0.r2") is registry.get("fit.r2")
    with pytest.raises(KeyError, match="no reported number is named 'rank.nope'"):
        registry.get("rank.nope")


def test_the_weightwatcher_spikes_and_spectras_edge_are_two_names() -> None:
    ww = registry.get("weightwatcher.columns.num_spikes")
    ours = registry.get("weightwatcher.mp_spikes")
    assert ww.label == "WW num_spikes" and ww.ww_name == "num_spikes"
    assert ours.label != ww.label and ours.ww_name is None
    assert registry.get("density.xmin").scale == registry.SPECTRA_SCALE
    assert registry.get("weightwatcher.columns.xmin").scale == registry.WW_SCALE


def test_entries_are_well_formed() -> None:
    paths = [m.path for m in registry.METRICS]
    assert len(paths) == len(set(paths))
    for m in registry.METRICS:
        assert m.kind in registry.KINDS and m.views <= set(registry.VIEWS), m.path
        assert m.label and m.definition and "SPEC" not in m.definition, m.path
        assert m.se is None or registry.find(m.se) is not None, m.path
        format(1.5, m.fmt)
    assert registry.get("rank.participation_ratio").format(12.345) == "12.3"
    assert registry.get("rank.numerical_rank").format(7) == "7"
    assert registry.get("fit.alpha").format(None) == "—"


def _schema_numbers(schema: dict, node: dict, prefix: str = "", depth: int = 0) -> set[str]:
    """The dotted paths of the schema's numeric properties (``$ref``, ``oneOf`` and arrays followed)."""
    from spectra_cli.results import _object_of

    out: set[str] = set()
    if depth > 12:
        return out
    items = node.get("items") if isinstance(node, dict) else None
    if isinstance(items, dict):
        return _schema_numbers(schema, items, prefix + ".*", depth + 1)
    obj = _object_of(schema, node)
    if obj is not None:
        for k, v in obj["properties"].items():
            out |= _schema_numbers(schema, v, f"{prefix}.{k}".lstrip("."), depth + 1)
        return out
    target = node
    while isinstance(target, dict) and "$ref" in target:
        target = schema["$defs"][target["$ref"].rsplit("/", 1)[-1]]
    types = target.get("type") if isinstance(target, dict) else None
    types = types if isinstance(types, list) else [types]
    if "number" in types or "integer" in types:
        out.add(prefix)
    return out


def test_the_schema_is_filled_from_the_registry_and_knows_no_other_number() -> None:
    from spectra_cli.results import report_schema, schema_node

    schema = report_schema()
    unknown = sorted(p for p in _schema_numbers(schema, schema) if registry.find(p) is None)
    assert not unknown
    for m in registry.METRICS:
        if "*" in m.path or m.path.startswith(("options.", "timings.", "source.")) or m.document != "report":
            continue
        node = schema_node(schema, m.path)
        assert node is not None, m.path
        assert node["properties"][m.name]["description"].startswith(m.label + ": "), m.path


def test_a_new_metric_needs_no_schema_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema

    from spectra_cli.results import report_schema

    new = registry.Metric("rank.brand_new_rank", "brand-new rank", "a rank for this test", type="number")
    monkeypatch.setattr(registry, "METRICS", (*registry.METRICS, new))
    schema = report_schema()
    assert schema["properties"]["rank"]["properties"]["brand_new_rank"]["type"] == ["number", "null"]
    doc = spectra.fit(np.random.default_rng(1).standard_normal((200, 12))).to_dict()
    doc["rank"]["brand_new_rank"] = 3.5
    jsonschema.validate(doc, schema)


def test_what_compare_subtracts_and_what_adds_a_field_are_the_registrys() -> None:
    for path in ("fit.alpha", "fits.1.alpha", "spectrum.spikes.count", "rank.participation_ratio", "source.n_rows"):
        assert registry.compared(path), path
    for path in ("fits.0.alpha", "models.models.broken.alpha_2", "timings.total", "options.ddof", "source.shape.0",
                 "spectrum.spikes.spikes.0.rank", "spectrum.spikes.spikes.1.features.3",
                 "spectrum.spikes.bulk.window.1", "spectrum.spikes.rogue_dimensions.0", "fit.population.cost.seconds"):
        assert not registry.compared(path), path
    assert registry.added_by("fits.2.population.alpha") == (("population", True),)
    assert registry.added_by("spectrum.spikes") == (("spikes", True),)  # a section: that of every number in it
    assert ("convention", "weightwatcher") in registry.added_by("weightwatcher.columns.num_spikes")
    assert registry.added_by("fit.alpha") == () and registry.added_by("rank.nope") == ()

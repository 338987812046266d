"""Significance where reports are compared: compare's se, z, p and significant (Benjamini-Hochberg),
and check's --max-change FIELD=Kse."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.run.compare import benjamini_hochberg


def test_benjamini_hochberg_keeps_the_step_up_discoveries():
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205]  # Benjamini & Hochberg's kind of example
    assert benjamini_hochberg(p, 0.05) == [True, True] + [False] * 6
    assert benjamini_hochberg([0.04, 0.01, 0.03, 0.2], 0.05) == [False, True, False, False]
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.04], 0.05) == [True] * 4  # p_(4) = 0.04 <= 4 * 0.05 / 4
    assert benjamini_hochberg([], 0.05) == []


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sig")
    rng = np.random.default_rng(11)
    sd = np.arange(1, 49) ** -0.4
    moved = sd.copy()
    moved[:2] *= 1.4
    for name, scale in (("a", sd), ("b", sd), ("c", moved)):
        np.save(tmp / f"{name}.npy", rng.standard_normal((2500, 48)) * scale)
    return tmp


def test_two_samples_of_one_population_flag_nothing_and_a_shift_is_flagged(samples):
    same = spectra.compare(str(samples / "a.npy"), str(samples / "b.npy"))
    rows = {r["field"]: r for r in same.to_dict()["metrics"]}
    pr = rows["rank.participation_ratio"]
    assert pr["se"] == pytest.approx(np.hypot(pr["se_a"], pr["se_b"]))
    assert pr["z"] == pytest.approx(pr["diff"] / pr["se"])
    assert pr["significant"] is False and rows["rank.k90"]["significant"] is None and rows["rank.k90"]["z"] is None
    assert not any(r["significant"] for r in rows.values())
    assert same.to_dict()["significance"]["tested"] >= 4  # (the stable rank is the top-PC share's: one test)
    assert 14 <= pr["dof"] <= 30.5  # (Welch-Satterthwaite over two reports of 16 row groups, 15 dof each at most)
    moved = spectra.compare(str(samples / "a.npy"), str(samples / "c.npy"))
    shifted = {r["field"]: r for r in moved.to_dict()["metrics"]}
    assert shifted["isotropy.top_pc_share"]["significant"] and shifted["rank.participation_ratio"]["significant"]
    assert shifted["rank.stable_rank"]["significant"] == shifted["isotropy.top_pc_share"]["significant"]
    assert abs(shifted["rank.participation_ratio"]["z"]) > 5
    with pytest.raises(spectra.OptionError, match="fdr=1.5 must lie between 0 and 1"):
        spectra.compare(str(samples / "a.npy"), str(samples / "b.npy"), fdr=1.5)


def test_the_compare_table_shows_z_and_marks_the_significant(cli, samples):
    r = cli("compare", samples / "a.npy", samples / "c.npy")
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "isotropy.top_pc_share" in ln)
    assert re.search(r"[+-]\d+\.\d \*", line), line  # the z cell, starred
    assert "Benjamini-Hochberg" in r.stdout


def test_check_max_change_in_standard_errors(cli, samples, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(cli("fit", samples / "a.npy", "--json").stdout)
    ok = cli("check", samples / "b.npy", "--baseline", base, "--max-change", "rank.participation_ratio=3se",
             "--max-change", "fit.alpha=3SE", "--json")
    assert ok.exit_code == 0, ok.stdout
    res = ok.json()["checks"]["results"]
    assert res[0]["in_se"] is True and 0 < abs(res[0]["value"] - res[0]["baseline"]) <= res[0]["limit"]
    bad = cli("check", samples / "c.npy", "--baseline", base, "--max-change", "rank.participation_ratio=3se")
    assert bad.exit_code == 1 and "3 SE =" in bad.stdout
    none = cli("check", samples / "c.npy", "--baseline", base, "--max-change", "rank.k90=2se")  # never has one
    assert none.exit_code == 2 and "rank.k90 has no standard error" in none.stderr and "fit.alpha" in none.stderr
    old = tmp_path / "old.json"  # a report made before the standard errors: the check fails, saying why
    doc = json.loads(base.read_text())
    doc["rank"].pop("se")
    old.write_text(json.dumps(doc))
    r = cli("check", samples / "c.npy", "--baseline", old, "--max-change", "rank.participation_ratio=2se", "--json")
    assert r.exit_code == 1 and "no standard error in the baseline" in r.json()["checks"]["results"][0]["message"]
    r = cli("check", samples / "b.npy", "--baseline", base, "--max-change", "fit.alpha=1e999se")
    assert r.exit_code == 2 and "not a finite number" in r.stderr
    r = cli("check", samples / "b.npy", "--baseline", base, "--max-change", "fit.alpha=3sd")
    assert r.exit_code == 2 and "FIELD=Kse" in r.stderr


def test_a_number_under_two_names_is_tested_once_and_costs_are_not_compared(tmp_path):
    rng = np.random.default_rng(12)
    for name in ("wa", "wb"):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((300, 200)) * np.arange(1, 201) ** -0.4)
    res = spectra.compare(str(tmp_path / "wa.npy"), str(tmp_path / "wb.npy"), convention="weightwatcher").to_dict()
    rows = {r["field"]: r for r in res["metrics"]}
    same = [rows[f] for f in ("density.alpha", "weightwatcher.alpha", "weightwatcher.columns.alpha") if f in rows]
    assert len(same) >= 2 and len({r["significant"] for r in same}) == 1
    tested = sum(r["p"] is not None for r in res["metrics"])
    assert res["significance"]["tested"] < tested  # the repeats share one test
    np.save(tmp_path / "tall.npy", rng.standard_normal((400, 32)) * np.arange(1, 33) ** -0.4)  # (first order: cheap)
    pop = spectra.compare(str(tmp_path / "tall.npy"), str(tmp_path / "tall.npy"), population=True,
                          window="3:12").to_dict()
    assert any(r["field"].startswith("fit.population.") for r in pop["metrics"])
    assert not [r for r in pop["metrics"] if ".cost." in r["field"] or r["field"].startswith("timings.")]


def test_a_function_of_a_field_that_repeats_another_shares_the_verdict_of_the_first(samples):
    # the top-PC share made equal to alpha (a hostile report): the stable rank's verdict follows a chain (a KeyError)
    from spectra_cli.run.compare import compare_rows

    docs = []
    for name in ("a.npy", "c.npy"):
        d = spectra.fit(str(samples / name)).to_dict()
        d["isotropy"]["top_pc_share"], d["isotropy"]["se"]["top_pc_share"] = d["fit"]["alpha"], d["fit"]["se"]
        docs.append(d)
    rows = {r.field: r for r in compare_rows(*docs)}
    assert rows["rank.stable_rank"].significant == rows["isotropy.top_pc_share"].significant \
        == rows["fit.alpha"].significant

"""The one list of what spectra reports: every number of every report kind, by its JSON path.

Each :class:`Metric` says, once, what a number is: its dotted ``path`` in the JSON (``*`` for a list
index), the ``label`` a reader sees (terminal tables, the report page, the batch summary, figure
axes), its ``definition`` (with the paper it comes from), the ``scale`` its value is on where that
matters (spectra's eigenvalues carry ``1/n``; WeightWatcher's are those of ``W^T W``, with no
``1/N``), its ``fmt``, the direction that is ``better`` where there is one, its WeightWatcher
name (``ww_name``) where it has one, the fit keywords that put it in a report (``added_by``) and
whether ``compare`` subtracts it (``compared``). The tables, ``to_pandas()``, the page, ``--summary``,
the figures, ``check``'s list of fields and its hints, ``compare``'s fields and the JSON Schema
(:func:`spectra_cli.results.report_schema`, whose metric properties are filled from here) all read
this list; a test walks every report kind and fails on a number this list does not know, and on two
numbers that share a label.

``kind`` sorts the entries: ``metric`` (a property of the data: what people compare and gate on),
``diagnostic`` (of an estimate: R², a standard error, a KS distance), ``count`` (sizes and ranks of
the input), ``input`` (an option echoed back), ``cost`` (seconds, bytes). Sub-reports reuse the
entries of the root: ``fits.0.alpha`` is ``fit.alpha``, the sequence report's ``context.rank.*`` is
``rank.*``, the whitening's ``isotropy_after.*`` is ``isotropy.*`` (:func:`canonical`).

This module is a leaf: it imports nothing of spectra's, so every floor may read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

#: Where a metric is shown besides the JSON: ``batch`` (a column of a batch's rows and
#: ``to_pandas()``), ``layer`` (the report page's per-layer table and figures, and ``--summary``),
#: ``table`` (its section of the terminal report), ``headline`` (what ``trend`` shows without ``--metric`` and the
#: training callbacks log: the signs of a representation's health and collapse), ``row`` (a batch's item in the
#: terminal table and in a notebook: shown where some item holds it).
VIEWS = ("batch", "layer", "table", "headline", "row")
KINDS = ("metric", "diagnostic", "count", "input", "cost")
#: The scales of eigenvalue-valued numbers.
SPECTRA_SCALE = "spectra's eigenvalues: the covariance (or X^T X / n uncentred), 1/n"
WW_SCALE = "WeightWatcher's eigenvalues: those of W^T W (squared singular values), no 1/N"


@dataclass(frozen=True, slots=True)
class Metric:
    """One reported number. ``path``: dotted, ``*`` for a list index, ``**`` (last) for every number
    below (used only for costs and echoed options). ``type``: its JSON type (``number``, ``integer``,
    each possibly null)."""

    path: str
    label: str
    definition: str
    kind: str = "metric"
    fmt: str = ".4g"
    scale: str | None = None
    better: str | None = None
    ww_name: str | None = None
    views: frozenset[str] = field(default_factory=frozenset)
    type: str = "number"
    nullable: bool = True
    #: Other paths that hold the same number (they share the label).
    same_as: tuple[str, ...] = ()
    #: The path of its standard error, where the report carries one.
    se: str | None = None
    #: The schema of the documents that hold it (``report``: spectra.report/1; ``sequence``).
    document: str = "report"
    #: The fit keywords, each with its value, that put it in a report (any one of them: ``(("spikes", True),)``);
    #: empty when every report of its kind holds it. ``check`` names them when a report lacks the field.
    added_by: tuple[tuple[str, Any], ...] = ()
    #: Whether ``compare`` subtracts it: False for numbers that name rather than measure (a spike's rank and
    #: coordinates, a window's ends, the input's shape). Costs and echoed options are never compared.
    compared: bool = True
    #: The name a training dashboard logs it under (:attr:`short`: the path's last part unless given).
    log_name: str | None = None
    #: The field this one is a function of (the stable rank is 1 / the top-PC share): ``compare`` tests the two
    #: as one change, the other's verdict given to this one, so that Benjamini-Hochberg counts it once.
    function_of: str | None = None

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def short(self) -> str:
        """The name a training dashboard logs it under: :attr:`log_name`, else the path's last part."""
        return self.log_name or self.name

    def format(self, value: Any) -> str:
        """The value as the tables print it (``—`` for none)."""
        if value is None:
            return "—"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return str(value)
        if self.type == "integer" and float(value).is_integer():
            return str(int(value))
        return format(value, self.fmt)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "label": self.label, "definition": self.definition, "kind": self.kind,
                "scale": self.scale, "better": self.better, "ww_name": self.ww_name, "format": self.fmt,
                "views": sorted(self.views), "same_as": list(self.same_as), "se": self.se,
                "added_by": dict(self.added_by), "compared": self.compared}


def _m(path: str, label: str, definition: str, *, views: str = "", **kw: Any) -> Metric:
    return Metric(path, label, definition, views=frozenset(views.split()), **kw)


def _added_by(keywords: tuple[tuple[str, Any], ...], *entries: Metric) -> tuple[Metric, ...]:
    """``entries``, each put in a report by one of ``keywords`` (a section that an option adds)."""
    return tuple(replace(m, added_by=keywords) for m in entries)


_CI = (("ci", True),)
_POPULATION = (("population", True),)
_SPIKES = (("spikes", True),)
_CONTROL = (("shuffled_control", True),)
_DENSITY = (("density", True), ("convention", "weightwatcher"))
_PARTITION = (("partition_isotropy", True),)
_PL = "Marchenko-Pastur"
METRICS: tuple[Metric, ...] = (
    _m("source.n_rows", "rows", "rows stored", kind="count", type="integer", views="batch"),
    _m("source.n_features", "features", "features (columns) stored", kind="count", type="integer", views="batch"),
    _m("source.shape.*", "shape", "the input's shape as stored", kind="count", type="integer", compared=False),
    # -- the rank-window power law ------------------------------------------------------------------
    _m("fit.alpha", "alpha (rank fit)", "the exponent of lambda_j ~ j^(-alpha) over the fit's rank window (least "
       "squares on log lambda against log j, or the method named in fit.method)", views="batch layer headline row",
       fmt=".4f",
       se="fit.se"),
    _m("fit.se", "alpha (rank fit) SE", "the sampling standard error of the rank-fit exponent: its spread over "
       "samples of the rows (the delta method through the eigenvectors, rank.se_method)", kind="diagnostic",
       views="batch"),
    _m("fit.stderr", "alpha (rank fit) LS SE", "the least-squares standard error of the rank-fit exponent (the "
       "points' scatter about the line; not a sampling error: neighbouring eigenvalues are correlated)",
       kind="diagnostic", views="batch"),
    _m("fit.r2", "R^2 (rank fit)", "coefficient of determination of the rank fit on log-log axes",
       kind="diagnostic", views="batch row", fmt=".4f", better="higher"),
    _m("fit.residual_rms", "residual RMS (rank fit)", "root mean square of the rank fit's residuals in log10 lambda",
       kind="diagnostic", fmt=".3g"),
    _m("fit.intercept", "intercept (rank fit)", "the fitted log10 lambda at rank 1", kind="diagnostic"),
    _m("fit.bic", "BIC (rank fit)", "Bayesian information criterion of the fit's model on the window",
       kind="diagnostic"),
    _m("fit.n_points", "points (rank fit)", "ranks in the fit's window", kind="count", type="integer"),
    _m("fit.window.*", "window (rank fit)", "the first and last rank of the fit's window", kind="count",
       type="integer", views="batch"),
    _m("fit.alpha_2", "alpha after the break", "the exponent past the crossover of the broken law", fmt=".3f"),
    _m("fit.crossover", "crossover rank", "the rank where the broken law's two exponents meet", kind="diagnostic"),
    _m("fit.degree", "degree (log-corrected)", "the degree p of the log correction", kind="input", type="integer"),
    *_added_by(_CI,
        _m("fit.ci.low", "alpha (rank fit) CI low", "the low end of the bias-corrected (basic) bootstrap interval",
           kind="diagnostic", views="batch"),
        _m("fit.ci.high", "alpha (rank fit) CI high", "the high end of the bias-corrected (basic) bootstrap interval",
           kind="diagnostic", views="batch"),
        _m("fit.ci.bias", "bootstrap bias", "mean of the bootstrap replicates minus the fitted exponent",
           kind="diagnostic"),
        _m("fit.ci.percentile_low", "percentile CI low", "the 2.5 % quantile of the bootstrap replicates",
           kind="diagnostic"),
        _m("fit.ci.percentile_high", "percentile CI high", "the 97.5 % quantile of the bootstrap replicates",
           kind="diagnostic"),
        _m("fit.ci.level", "CI level", "the interval's coverage", kind="input"),
        _m("fit.ci.replicates", "bootstrap replicates", "replicates of the bootstrap", kind="input", type="integer"),
        _m("fit.ci.seed", "bootstrap seed", "the bootstrap's seed", kind="input", type="integer"),
        _m("fit.ci.groups", "bootstrap groups", "row groups resampled by the bootstrap", kind="count", type="integer"),
    ),
    *_added_by(_POPULATION,
        _m("fit.population.alpha", "alpha (population)", "the exponent of the population's power law that, sampled "
           "at this n and d, gives the observed spectrum (deterministic equivalent, with the data's sampling curve)",
           views="batch", fmt=".3f"),
        _m("fit.population.ci.*", "alpha (population) CI", "the population exponent's interval (low, high)",
           kind="diagnostic"),
        _m("fit.population.naive_alpha", "alpha (sample slope)", "the sample spectrum's slope over the population "
           "fit's window", kind="diagnostic", fmt=".3f"),
        _m("fit.population.model_alpha", "alpha (row model alone)", "the population exponent from the row model, "
           "before the sampling curve", kind="diagnostic", fmt=".3f"),
        _m("fit.population.shape_alpha", "alpha (shape match)", "the exponent matched on the spectrum's shape",
           kind="diagnostic"),
        _m("fit.population.match_rms", "match RMS (population)", "RMS of log10 of the matched against the observed "
           "eigenvalues", kind="diagnostic", fmt=".3g"),
        _m("fit.population.intercept", "intercept (population)", "the population law's log10 lambda at rank 1",
           kind="diagnostic"),
        _m("fit.population.slope_gain", "slope gain", "d(sample slope) / d(population exponent) at the estimate",
           kind="diagnostic"),
        _m("fit.population.level", "population CI level", "the interval's coverage", kind="input"),
        _m("fit.population.n_over_d", "n/d (population)", "rows (effective, when weighted) per feature",
           kind="count"),
        _m("fit.population.n_effective", "effective n (population)", "Kish's effective sample size", kind="count"),
        _m("fit.population.window.*", "window (population)", "the population fit's rank window", kind="count",
           type="integer"),
        _m("fit.population.ranks_matched.*", "ranks matched", "the ranks the population fit matched", kind="count",
           type="integer"),
        _m("fit.population.bend.**", "bend test", "the test of the power-law population: the window's bend (the "
           "coefficient of -(log j - m)^2) against the bends of the bootstrap samples", kind="diagnostic"),
        _m("fit.population.bootstrap.**", "population bootstrap", "the parametric bootstrap of the population fit",
           kind="diagnostic"),
        _m("fit.population.sampling_curve.**", "sampling curve", "the data's own sampling curve: the slope of "
           "sub-samples of its row groups against the model's", kind="diagnostic"),
        _m("fit.population.rows.**", "row model", "the row model of the population fit: spread of row scales, "
           "coordinates' kurtosis", kind="diagnostic"),
        _m("fit.population.segments.**", "population segments", "the knots and exponents of the curved alternative",
           kind="diagnostic"),
        _m("fit.population.cost.**", "population cost", "seconds and evaluations of the population fit", kind="cost"),
    ),
    _m("local_slope.**", "local slope", "the slope of log lambda against log j in a sliding window of "
       "width_decades", kind="diagnostic"),
    # -- the spectrum -------------------------------------------------------------------------------
    _m("spectrum.eigenvalues.*", "eigenvalue", "the eigenvalues, largest first", scale=SPECTRA_SCALE),
    _m("spectrum.explained_variance_ratio.*", "explained variance", "lambda_j / sum lambda", fmt=".4f"),
    _m("spectrum.total_variance", "total variance", "sum lambda = tr C", scale=SPECTRA_SCALE),
    _m("spectrum.k90", "k90", "smallest k whose cumulative explained variance reaches 0.90", type="integer",
       same_as=("rank.k90",)),
    _m("spectrum.k95", "k95", "smallest k whose cumulative explained variance reaches 0.95", type="integer",
       same_as=("rank.k95",)),
    _m("spectrum.k99", "k99", "smallest k whose cumulative explained variance reaches 0.99", type="integer",
       same_as=("rank.k99",)),
    _m("spectrum.numerical_floor", "numerical floor", "the rounding bound below which an eigenvalue is not "
       "resolved (floor_definition)", kind="diagnostic", scale=SPECTRA_SCALE),
    _m("spectrum.numerical_rank", "numerical rank", "eigenvalues above the numerical floor", type="integer",
       same_as=("rank.numerical_rank",)),
    _m("spectrum.usable_rank", "usable rank", "the resolved eigenvalues less the near-null ones", type="integer",
       views="batch"),
    _m("spectrum.sampling_rank", "sampling rank", "at most min(n - 1, d) non-zero eigenvalues (n when "
       "uncentred)", kind="count", type="integer"),
    _m("spectrum.near_null", "near-null directions", "resolved eigenvalues more than 1e4 times below the one "
       "before them (e.g. LayerNorm's)", kind="count", type="integer", views="batch"),
    _m("spectrum.structural_zeros", "structural zeros", "d - n zero eigenvalues at n < d, not listed",
       kind="count", type="integer"),
    _m("spectrum.n_features", "d", "features", kind="count", type="integer"),
    _m("spectrum.n_samples", "n", "rows used", kind="count", type="integer"),
    _m("spectrum.n_over_d", "n/d", "rows per feature", kind="count", fmt=".3g"),
    _m("spectrum.top_k.k", "eigenvalues computed", "the leading k of d eigenvalues computed (--top)", kind="count",
       type="integer"),
    _m("spectrum.top_k.relative_error_bound", "top-k error bound", "the block Lanczos bound on each computed "
       "eigenvalue's relative error", kind="diagnostic"),
    _m("spectrum.top_k.trace", "trace (top-k)", "tr C, exact from the moments: the sum of all d eigenvalues",
       kind="diagnostic", scale=SPECTRA_SCALE),
    _m("spectrum.top_k.**", "top-k route", "the block Lanczos run: block size, Krylov dimension, seed",
       kind="input"),
    # -- spikes above the power-law bulk (--spikes; not WeightWatcher's MP spikes) -------------------------
    *_added_by(_SPIKES,
        _m("spectrum.spikes.count", "spikes above the bulk", "eigenvalues above the power-law bulk of the rank window "
           "at this n and d (a sequential Tracy-Widom test at spectrum.spikes.level; not WeightWatcher's num_spikes, "
           "whose bulk is a Marchenko-Pastur fit)", kind="count", type="integer", views="batch layer headline row",
           log_name="spikes"),
        _m("spectrum.spikes.spikes.*.rank", "spike rank", "the spike's rank in the spectrum", kind="count",
           type="integer", compared=False),
        _m("spectrum.spikes.spikes.*.eigenvalue", "spike eigenvalue", "the spike's eigenvalue", scale=SPECTRA_SCALE,
           compared=False),
        _m("spectrum.spikes.spikes.*.p_value", "spike p-value", "1 - F_1 of its Tracy-Widom statistic, under the bulk "
           "that the ranks below it make", kind="diagnostic", compared=False),
        _m("spectrum.spikes.spikes.*.statistic", "spike TW statistic", "(lambda - mu) / sigma: the eigenvalue above "
           "the bulk's edge in Tracy-Widom units", kind="diagnostic", compared=False),
        _m("spectrum.spikes.spikes.*.edge", "spike bulk edge", "mu: where the largest eigenvalue of the bulk below it "
           "sits (El Karoui 2007)", kind="diagnostic", scale=SPECTRA_SCALE, compared=False),
        _m("spectrum.spikes.spikes.*.share", "spike share", "lambda / sum lambda: the share of the variance on the "
           "spike's direction", fmt=".4f", compared=False),
        _m("spectrum.spikes.spikes.*.features.*", "spike feature", "the coordinates (0-based column indices) with the "
           "largest squared loadings on the spike's eigenvector", kind="count", type="integer", compared=False),
        _m("spectrum.spikes.spikes.*.loadings.*", "spike loading", "the squared loadings of those coordinates (the "
           "eigenvector has unit norm: they sum to at most 1)", kind="diagnostic", fmt=".3f", compared=False),
        _m("spectrum.spikes.rogue_dimensions.*", "rogue dimension", "a coordinate that carries at least half of a "
           "spike's direction (0-based column index)", kind="count", type="integer", compared=False),
        _m("spectrum.spikes.level", "spike test level", "the level of each test of the sequence", kind="input"),
        _m("spectrum.spikes.n", "spike test rows", "the degrees of freedom of the sampling model (rows - 1 centred)",
           kind="input"),
        _m("spectrum.spikes.bulk.alpha", "bulk alpha (spikes)", "the exponent of the power-law population behind the "
           "bulk, fitted over the window below the spikes through its deterministic equivalent", kind="diagnostic",
           fmt=".3f"),
        _m("spectrum.spikes.bulk.scale", "bulk scale (spikes)", "C of the bulk's population tau_j = C j^-alpha",
           kind="diagnostic", scale=SPECTRA_SCALE),
        _m("spectrum.spikes.bulk.window.*", "window (spikes)", "the rank window the bulk is fitted over", kind="count",
           type="integer", compared=False),
        _m("spectrum.spikes.bulk.edge", "bulk edge", "where the bulk's largest sample eigenvalue sits (El Karoui "
           "2007's centring)", kind="diagnostic", scale=SPECTRA_SCALE),
        _m("spectrum.spikes.bulk.bbp_threshold", "spike detection threshold", "a population eigenvalue above it "
           "separates from the bulk at this n and d (Baik, Ben Arous & Peche 2005); below it no test can find it",
           kind="diagnostic", scale=SPECTRA_SCALE),
        _m("spectrum.spikes.next.rank", "first rank in the bulk", "the first rank tested and not a spike",
           kind="count", type="integer"),
        _m("spectrum.spikes.next.p_value", "first bulk p-value", "its p-value", kind="diagnostic"),
        _m("spectrum.spikes.cost.**", "spikes cost", "seconds and evaluations of the spike test", kind="cost"),
    ),
    *_added_by(_CONTROL,
        _m("control.eigenvalues.*", "shuffled eigenvalue", "eigenvalues with each column permuted independently",
           kind="diagnostic", scale=SPECTRA_SCALE),
        _m("control.meets_at_rank", "control meets data at rank", "the first rank where the shuffled control's "
           "eigenvalue reaches the data's", kind="diagnostic", type="integer"),
        _m("control.rows", "control rows", "rows of the shuffled control", kind="count", type="integer"),
        _m("control.seed", "control seed", "the permutations' seed", kind="input", type="integer"),
    ),
    _m("capacity.counting.*.eps", "eps", "the threshold of N(eps)", kind="input"),
    _m("capacity.counting.*.N", "N(eps)", "#{lambda >= eps}", type="integer"),
    _m("capacity.capacity.*.tau", "tau", "the scale of N(tau)", kind="input"),
    _m("capacity.capacity.*.N", "N(tau)", "sum lambda / (lambda + tau)"),
    # -- effective ranks ----------------------------------------------------------------------------
    _m("rank.participation_ratio", "participation ratio", "(sum lambda)^2 / sum lambda^2 (Gao et al. 2017)",
       views="batch layer table headline row", fmt=".1f", better="higher", se="rank.se.participation_ratio"),
    _m("rank.participation_ratio_population", "participation ratio (population)",
       "(with --population) ((tr S)^2 - sum p_i^2 |y_i|^4) / (tr S^2 - sum p_i^2 |y_i|^4): the ratio of unbiased "
       "estimators of (tr Sigma)^2 and tr Sigma^2 (U-statistics, Chen, Zhang & Zhong 2010; p = w / sum w, y_i the "
       "rows about the mean), from the moments and the histogram of squared row norms", views="table", fmt=".1f",
       added_by=_POPULATION),
    _m("rank.entropy_rank", "entropy rank", "exp(-sum q log q), q = lambda / sum lambda (Roy & Vetterli 2007)",
       views="batch layer table headline", fmt=".1f", better="higher", se="rank.se.entropy_rank"),
    _m("rank.rankme", "entropy rank (uncentred singular values)",
       "exp(-sum p log p), p = sigma / sum sigma + 1e-7, sigma the singular values of the "
       "uncentred matrix (Garrido et al. 2023)", views="batch table", fmt=".1f", better="higher"),
    _m("rank.stable_rank", "stable rank", "sum lambda / lambda_1 = tr C / ||C|| (Rudelson & Vershynin 2007)",
       views="batch table", fmt=".2f", se="rank.se.stable_rank", function_of="isotropy.top_pc_share"),
    _m("rank.numerical_rank", "numerical rank", "eigenvalues above the numerical floor", type="integer",
       views="batch", same_as=("spectrum.numerical_rank",)),
    _m("rank.k90", "k90", "smallest k whose cumulative explained variance reaches 0.90", type="integer",
       same_as=("spectrum.k90",)),
    _m("rank.k95", "k95", "smallest k whose cumulative explained variance reaches 0.95", type="integer",
       same_as=("spectrum.k95",)),
    _m("rank.k99", "k99", "smallest k whose cumulative explained variance reaches 0.99", type="integer",
       same_as=("spectrum.k99",)),
    _m("rank.se.**", "rank SE", "the standard error of each rank (rank.se_method; the delta method through the "
       "eigenvectors)", kind="diagnostic"),
    _m("rank.se_method.**", "rank SE row model", "the row model of the standard errors: a = Var z^2 / lambda^2, c "
       "the rows' scale spread, n_effective", kind="diagnostic"),
    _m("rank.bounds.**", "rank bounds", "on the top-k route: the interval of a bounded rank", kind="diagnostic"),
    # -- the density exponent -----------------------------------------------------------------------
    *_added_by(_DENSITY,
        _m("density.alpha", "alpha (density)", "p(lambda) ~ lambda^(-alpha) on the tail lambda >= xmin: continuous "
           "Hill MLE, xmin minimising the KS distance (Clauset et al. 2009)", views="batch", fmt=".3f"),
        _m("density.stderr", "alpha (density) SE at x_min", "(alpha - 1) / sqrt(n_tail), the Hill estimator's "
           "standard error with x_min held fixed: it leaves out the choice of x_min (from sample to sample the fit can "
           "jump between tails, e.g. alphas near 1.8 and 3.0), so it is no sampling error of the whole fit and "
           "compare and check --max-change do not test against it", kind="diagnostic"),
        _m("density.xmin", "x_min (density)", "the start of the density fit's tail", kind="diagnostic",
           scale=SPECTRA_SCALE, views="batch"),
        _m("density.ks_distance", "KS distance (density)", "the Kolmogorov-Smirnov distance of the tail and the fit",
           kind="diagnostic", views="batch", better="lower"),
        _m("density.n_tail", "tail size (density)", "eigenvalues at or above x_min", kind="count", type="integer",
           views="batch"),
        _m("density.n_candidates", "x_min candidates", "the candidate x_min values", kind="count", type="integer"),
        _m("density.candidates_scanned", "x_min candidates scanned", "the candidates fitted", kind="count",
           type="integer"),
        _m("density.rank_exponent_equivalent", "rank exponent equivalent (density)", "1 / (alpha - 1): the rank "
           "exponent of the density law"),
        _m("density.tails.**", "tail laws", "the density fit's tail under the power law, the truncated power law, "
           "the lognormal and the exponential (maximum likelihood on [xmin, inf)), their log-likelihood ratios and "
           "p-values (Vuong; Wilks for the nested pair) and the parameters' standard errors", kind="diagnostic"),
    ),
    # -- isotropy -----------------------------------------------------------------------------------
    _m("isotropy.partition_isotropy", "partition isotropy", "min Z(c) / max Z(c), Z(c) = sum_i w_i exp(c^T x_i "
       "/ s), c the eigenvectors of sum w x x^T / s^2 as numpy.linalg.eigh returns them (Mu & Viswanath 2018); "
       "s = std of all entries ('seed') or 1 ('none'); log-sum-exp accumulation", views="table", better="higher",
       added_by=_PARTITION),
    _m("isotropy.partition_isotropy_symmetric", "partition isotropy (±c)", "the same over c and -c (independent "
       "of eigenvector signs)", views="table", better="higher", added_by=_PARTITION),
    _m("isotropy.se.**", "isotropy SE", "the standard error of each isotropy measure (isotropy.se_method)",
       kind="diagnostic"),
    _m("isotropy.se_method.**", "isotropy SE row model", "the row model of the standard errors (as rank.se_method)",
       kind="diagnostic"),
    _m("isotropy.log_z_min", "log Z min", "log of the smallest partition function", kind="diagnostic",
       added_by=_PARTITION),
    _m("isotropy.log_z_max", "log Z max", "log of the largest partition function", kind="diagnostic",
       added_by=_PARTITION),
    _m("isotropy.scale_value", "partition scale s", "the scale s of the partition function", kind="input",
       added_by=_PARTITION),
    _m("isotropy.mean_cosine", "mean cosine", "exact mean cosine over pairs i != j, (||sum w u||^2 - sum w^2) / "
       "((sum w)^2 - sum w^2), u = x/||x||; zero rows excluded", views="batch layer table", better="lower",
       fmt=".3f"),
    _m("isotropy.zero_rows", "zero rows", "rows of norm 0, excluded from the cosine", kind="count",
       type="integer", nullable=False),
    _m("isotropy.top_pc_share", "top-PC share", "lambda_1 / sum lambda of the covariance",
       views="batch layer table headline", better="lower", se="isotropy.se.top_pc_share", fmt=".4f"),
    _m("isotropy.mean_norm_ratio", "mean-norm ratio", "||mean|| / mean ||x_i||", views="table", better="lower"),
    _m("isotropy.isoscore", "IsoScore", "Rudman et al. 2022 from the d covariance eigenvalues", views="table",
       better="higher", se="isotropy.se.isoscore", added_by=(("isoscore", True),)),
    # -- WeightWatcher's metrics (Martin & Mahoney) -------------------------------------------------
    *_added_by(_DENSITY,
        _m("weightwatcher.alpha", "WW alpha", "density exponent p(lambda) ~ lambda^-alpha (Hill MLE, KS xmin): "
           "WeightWatcher's alpha", ww_name="alpha", views="batch layer row", fmt=".3f", better="inside alpha_range",
           same_as=("weightwatcher.columns.alpha",)),
        _m("weightwatcher.alpha_weighted", "WW alpha_weighted", "alpha * log10(lambda_max)", ww_name="alpha_weighted",
           views="batch layer", fmt=".3f", scale=WW_SCALE, same_as=("weightwatcher.columns.alpha_weighted",)),
        _m("weightwatcher.log_norm", "WW log_norm", "log10(sum lambda) = log10 ||W||_F^2", ww_name="log_norm",
           views="batch layer", fmt=".3f", scale=WW_SCALE, same_as=("weightwatcher.columns.log_norm",)),
        _m("weightwatcher.log_spectral_norm", "WW log_spectral_norm", "log10(lambda_max) = log10 ||W||_2^2",
           ww_name="log_spectral_norm", views="batch layer", fmt=".3f", scale=WW_SCALE,
           same_as=("weightwatcher.columns.log_spectral_norm",)),
        _m("weightwatcher.stable_rank", "WW stable_rank", "sum lambda / lambda_max", ww_name="stable_rank",
           views="batch layer", fmt=".2f", same_as=("weightwatcher.columns.stable_rank",)),
        _m("weightwatcher.mp_spikes", "spikes over the Marchenko-Pastur edge", "eigenvalues above the "
           "Marchenko-Pastur edge (sum lambda / M)(1 + 1/sqrt(Q))^2, N x M, N >= M, Q = N/M (closed form; "
           "WeightWatcher fits sigma by kernel density)", views="batch layer", type="integer", nullable=False),
        _m("weightwatcher.verdict", "verdict", "over-trained if alpha < lo, under-trained if alpha > hi, else ok",
           views="batch row", type="string"),
        _m("weightwatcher.mp_bulk_edge", "Marchenko-Pastur edge", f"the {_PL} edge (sum lambda / M)(1 + 1/sqrt(Q))^2",
           kind="diagnostic", scale=WW_SCALE),
        _m("weightwatcher.alpha_range.*", "healthy alpha range", "WeightWatcher's guidance for its alpha (2..6)",
           kind="input"),
        _m("weightwatcher.parameters", "parameters", "N x M entries of the weight matrix", kind="count",
           type="integer", nullable=False),
        # WeightWatcher 0.7.7's analyze() columns by its names (on W^T W's eigenvalues)
        *(_m(f"weightwatcher.columns.{name}", f"WW {name}", text, ww_name=name, kind=kind,
             scale=WW_SCALE if scaled else None, type="integer" if integer else "number",
             views="layer" if name in ("num_spikes", "mp_softrank") else "",
             fmt=".3f" if name == "mp_softrank" else ".4g")
          for name, text, kind, scaled, integer in (
              ("N", "the larger side of the weight matrix (of a convolution: WeightWatcher's label)", "count", False,
               True),
              ("M", "the smaller side of the weight matrix (of a convolution: WeightWatcher's label)", "count", False,
               True),
              ("Q", "N / M", "count", False, False),
              ("rf", "a convolution's receptive field kh x kw: its slices, each an N x M matrix", "count", False,
               True),
              ("num_evals", "eigenvalues of W^T W", "count", False, True),
              ("xmin", "the start of the density fit's tail", "diagnostic", True, False),
              ("xmax", "the largest eigenvalue", "diagnostic", True, False),
              ("D", "the KS distance of the density fit", "diagnostic", False, False),
              ("sigma", "the density fit's standard error (alpha - 1) / sqrt(num_pl_spikes)", "diagnostic", False,
               False),
              ("num_pl_spikes", "eigenvalues in the density fit's tail", "count", False, True),
              ("norm", "sum lambda = ||W||_F^2", "metric", True, False),
              ("spectral_norm", "lambda_max = ||W||_2^2", "metric", True, False),
              ("log_alpha_norm", "log10 sum lambda^alpha", "metric", False, False),
              ("lambda_max", "the largest eigenvalue", "metric", True, False),
              ("sv_max", "the largest singular value", "metric", False, False),
              ("sv_min", "the smallest singular value", "metric", False, False),
              ("matrix_rank", "singular values above max(sv) N eps (numpy's matrix_rank)", "metric", False, True),
              ("rank_loss", "M - matrix_rank", "metric", False, True),
              ("weak_rank_loss", "eigenvalues below 1e-6", "metric", False, True),
              ("entropy", "the matrix entropy -sum p log p / log(rank), p = lambda / sum lambda", "metric", False,
               False),
              ("num_spikes", "eigenvalues above the bulk edge of WeightWatcher's Marchenko-Pastur fit (kernel density "
               "sigma, Tracy-Widom margin)", "metric", False, True),
              ("sigma_mp", "the Marchenko-Pastur fit's sigma", "diagnostic", False, False),
              ("mp_softrank", "bulk_max / lambda_max", "metric", False, False),
              ("bulk_max", "the Marchenko-Pastur fit's bulk edge", "diagnostic", True, False),
              ("bulk_min", "the Marchenko-Pastur fit's lower edge", "diagnostic", True, False),
              ("W_scale", "the weight matrix's scale in the Marchenko-Pastur fit", "diagnostic", False, False),
              ("alpha_hill", "AlphaPruning's layer alpha (Lu et al. 2024, its default xmin_peak): the Hill fit of "
               "least KS distance with xmin near the peak of the ESD's log10-histogram (not a WeightWatcher column)",
               "metric", False, False),
              ("xmin_hill", "the xmin of AlphaPruning's alpha", "diagnostic", True, False),
          )),
    ),
    # -- whitening ----------------------------------------------------------------------------------
    _m("whitening.k", "whitening k", "the directions kept", kind="input", type="integer"),
    _m("whitening.eps", "whitening eps", "the eigenvalue floor added before the inverse square root",
       kind="input"),
    _m("whitening.d_in", "d in", "features read", kind="count", type="integer"),
    _m("whitening.d_out", "d out", "features written", kind="count", type="integer"),
    _m("whitening.zeroed_directions", "zeroed directions", "directions at or below the floor, set to 0",
       kind="count", type="integer"),
    _m("whitening.output.rows", "rows written", "rows of the whitened output", kind="count", type="integer"),
    # -- the sequence report (spectra.sequence/1) ----------------------------------------------------
    *(_m(path, lb, text, document="sequence", **kw) for path, lb, text, kw in (
        ("per_position.*.position", "position", "the token position", {"kind": "count", "type": "integer"}),
        ("per_position.*.n", "windows at the position", "unmasked windows at the position",
         {"kind": "count", "type": "integer"}),
        ("per_position.*.participation_ratio", "participation ratio (position)", "the participation ratio of the "
         "rows at one position", {}),
        ("per_position.*.alpha", "alpha (position)", "the rank-fit exponent of the rows at one position", {}),
        ("per_position.*.mean_cosine", "mean cosine (position)", "the mean cosine of the rows at one position", {}),
        ("pooled.mean_cosine", "mean cosine (pooled)", "the mean cosine of all positions' rows together", {}),
        ("lag_energy.lags.*", "lag", "the lag in positions", {"kind": "count", "type": "integer"}),
        ("lag_energy.data.*", "lag energy", "||C_lag||_F^2 / ||C_0||_F^2 of the data, per lag", {}),
        ("lag_energy.shuffled.*", "lag energy (shuffled)", "the same with the windows shuffled",
         {"kind": "diagnostic"}),
        ("controls.shuffled.seed", "shuffled-windows seed", "the shuffled control's seed",
         {"kind": "input", "type": "integer"}),
    )),
    # -- check's verdicts ---------------------------------------------------------------------------
    _m("checks.results.*.value", "checked value", "the field's value in the report checked"),
    _m("checks.results.*.limit", "check limit", "a max-change limit in standard errors, resolved: K sqrt(se^2 + "
       "se_baseline^2)", kind="diagnostic"),
    _m("checks.results.*.baseline", "baseline value", "the field's value in the baseline report"),
    _m("checks.results.*.bound.**", "check bound", "the bound of the check (LO and HI, or the limit)",
       kind="input"),
    # -- a change between two checkpoints (batch --base) ---------------------------------------------
    _m("base_model.**", "base and fine-tune", "the base's and the fine-tune's own metrics beside their change (a = "
       "base, b = fine-tune), with compare's test", kind="diagnostic", compared=False),
    # -- what was read, how, and at what cost ------------------------------------------------------
    _m("source.**", "source", "what was read: shapes, files, rows used or dropped", kind="count"),
    _m("options.**", "options", "the options that change a number, echoed", kind="input"),
    _m("timings.**", "seconds", "wall-clock seconds of each stage (and a peak-memory estimate in bytes)",
       kind="cost"),
)

#: Numbers of the documents that are about other reports' metrics (their ``field`` names it).
DERIVED: dict[str, tuple[Metric, ...]] = {
    "spectra.compare/1": (
        _m("metrics.*.a", "first", "the field's value in the first report", kind="metric"),
        _m("metrics.*.b", "second", "the field's value in the second report", kind="metric"),
        _m("metrics.*.diff", "change", "second - first", kind="metric"),
        _m("metrics.*.rel_diff", "relative change", "(second - first) / |first|", kind="metric"),
        _m("metrics.*.se", "SE of the change", "sqrt(se_a^2 + se_b^2): the standard error of the change of two "
           "independent samples", kind="diagnostic"),
        _m("metrics.*.se_a", "first SE", "the field's standard error in the first report", kind="diagnostic"),
        _m("metrics.*.se_b", "second SE", "the field's standard error in the second report", kind="diagnostic"),
        _m("metrics.*.z", "z", "the change over its standard error", kind="diagnostic"),
        _m("metrics.*.dof", "degrees of freedom", "z's degrees of freedom (Welch and Satterthwaite's, from each "
           "side's G - 1 row groups; null: first-order errors, normal)", kind="diagnostic"),
        _m("metrics.*.p", "p", "the two-sided p-value of z (Student's t with dof, normal where dof is null)",
           kind="diagnostic"),
        _m("significance.**", "significance", "the test of the changes: the false discovery rate and how many "
           "were tested", kind="input"),
    ),
    "spectra.batch-summary/1": (
        _m("layers", "layers", "layers summarised", kind="count", type="integer"),
        _m("failed", "failed", "items that failed", kind="count", type="integer"),
        _m("skipped", "skipped", "tensors that are not matrices", kind="count", type="integer"),
        _m("metrics.*.layers", "layers with the metric", "layers with a value", kind="count", type="integer"),
        _m("metrics.*.mean", "mean", "the plain mean over layers"),
        _m("metrics.*.median", "median", "the median over layers"),
        _m("metrics.*.weighted_mean", "weighted mean", "the mean weighted by each layer's parameters"),
        _m("metrics.*.weighted_median", "weighted median", "the median weighted by each layer's parameters"),
        _m("worst.**", "worst layers", "the layers furthest outside the healthy range, with their values"),
        _m("weightwatcher_summary.**", "WeightWatcher's summary", "get_summary(): the plain mean of its columns"),
        _m("verdicts.**", "verdicts", "layers per verdict", kind="count", type="integer"),
        _m("alpha_range.*", "healthy alpha range", "the range the verdicts use", kind="input"),
    ),
    "spectra.trend/1": (
        _m("series.*.points.*.step", "step", "the step of the item", kind="count"),
        _m("series.*.points.*.intervals.**", "interval", "the value's interval (the CI, or ± the standard error)",
           kind="diagnostic"),
        _m("series.*.points.*.**", "value", "the metric's value at the step (keyed by its field)"),
    ),
    "spectra.check-results/1": (
        _m("items.*.results.*.value", "checked value", "the field's value in the item", kind="metric"),
        _m("items.*.results.*.limit", "check limit", "a max-change limit in standard errors, resolved",
           kind="diagnostic"),
        _m("items.*.results.*.baseline", "baseline value", "the field's value in the baseline report"),
        _m("items.*.results.*.bound.**", "check bound", "the bound of the check (LO and HI, or the limit)",
           kind="input"),
    ),
}

_BY_PATH: dict[str, Metric] = {**{a: m for m in METRICS for a in m.same_as}, **{m.path: m for m in METRICS}}
_SUBTREES: tuple[Metric, ...] = tuple(sorted((m for m in METRICS if m.path.endswith(".**")),
                                              key=lambda m: -len(m.path)))
#: Sub-reports whose fields are those of the root report.
_PREFIXES = (
    (re.compile(r"^fits\.\*\."), "fit."),
    (re.compile(r"^models\.models\.[^.]+\."), "fit."),
    (re.compile(r"^(?:context|pooled|controls\.[^.]+)\."), ""),
    (re.compile(r"^whitening\.isotropy_after\."), "isotropy."),
    (re.compile(r"^whitening\.spectrum_after\."), "spectrum."),
)


def canonical(path: str) -> str:
    """A concrete path (``fits.1.alpha``, ``context.rank.participation_ratio``) as the registry names it
    (``fit.alpha``, ``rank.participation_ratio``): list indices as ``*``, sub-reports as the root."""
    out = ".".join("*" if p.isdigit() else p for p in path.split("."))
    if out in _BY_PATH:
        return out
    for pattern, root in _PREFIXES:
        if pattern.match(out):
            rest = pattern.sub(root, out, count=1)
            return canonical(rest) if rest != out else out
    return out


def find(path: str, schema: str | None = None) -> Metric | None:
    """The entry of a concrete or canonical path (None when unknown). ``schema``: the document's
    ``schema`` for documents about other reports (compare, summary, trend)."""
    table = _BY_PATH if schema is None or schema not in DERIVED else {m.path: m for m in DERIVED[schema]}
    subtrees = _SUBTREES if schema is None or schema not in DERIVED else tuple(
        m for m in DERIVED[schema] if m.path.endswith(".**"))
    key = canonical(path)
    if key in table:
        return table[key]
    for m in subtrees:
        stem = m.path[:-3]
        if key == stem or key.startswith(stem + "."):
            return m
    return None


def get(path: str) -> Metric:
    """The entry of ``path``; KeyError names the path when there is none."""
    m = find(path)
    if m is None:
        raise KeyError(f"no reported number is named {path!r}")
    return m


def label(path: str) -> str:
    """What a reader calls the number at ``path`` (the path itself when it is not registered)."""
    m = find(path)
    return m.label if m is not None and not m.path.endswith(".**") else path


def se_path(path: str) -> str | None:
    """Where a report holds the standard error of the number at ``path`` (``fits.1.alpha`` ->
    ``fits.1.se``, ``rank.participation_ratio`` -> ``rank.se.participation_ratio``); None when the
    registry gives it none."""
    m = find(path)
    if m is None or m.se is None or m.path.endswith(".**"):
        return None
    stem = m.path.rsplit(".", 1)[0]
    if not m.se.startswith(stem + ".") or not path.endswith("." + m.name):
        return m.se
    return path[: len(path) - len(m.name) - 1] + m.se[len(stem):]


def function_of(path: str) -> str | None:
    """The field the number at ``path`` is a function of (for ``compare``'s family of tests), or None."""
    m = find(path)
    return m.function_of if m is not None else None


def added_by(path: str) -> tuple[tuple[str, Any], ...]:
    """The fit keywords (with their values) that put the number at ``path`` in a report, any one of them;
    for a section (``spectrum.spikes``), those of every number in it. Empty when every report holds it."""
    m = find(path)
    if m is not None:
        return m.added_by
    key = canonical(path)
    below = {x.added_by for x in METRICS if x.path.startswith(key + ".")}
    return below.pop() if len(below) == 1 else ()


#: Sub-reports that ``compare`` leaves out: ``fits.0`` repeats ``fit``, and ``models`` is the report's own
#: comparison of the models over the window (the chosen model's fit is ``fit``).
NOT_COMPARED = re.compile(r"^(?:fits\.0|models)\.")


def compared(path: str) -> bool:
    """Whether ``compare`` subtracts the number at ``path``: a measured number (not a cost, an option echoed or
    a number that names, such as a spike's rank) that is not repeated under another name. An unknown path is
    compared."""
    if NOT_COMPARED.match(path):
        return False
    m = find(path)
    return m is None or (m.compared and m.kind not in ("cost", "input"))


def shown(v: float, fmt: str) -> str:
    """A metric's value as every screen shows it (the terminal's tables and summaries, the pages): in the
    registry's ``fmt``, or in 4 significant digits where ``fmt`` would print it as 0 or too long (below 1e-3, from
    1e6); ``fmt`` ``"d"``: a whole number with thousands separators."""
    if fmt == "d" and abs(v) < 1e15 and v == int(v):
        return format(int(v), ",")
    if v != 0 and not 1e-3 <= abs(v) < 1e6:
        return format(v, ".4g")
    return format(v, fmt if fmt != "d" else ".0f")


def view(name: str) -> tuple[Metric, ...]:
    """The entries shown in one of :data:`VIEWS`, in the registry's order."""
    return tuple(m for m in METRICS if name in m.views)


def section(name: str, view_name: str | None = None) -> tuple[Metric, ...]:
    """The entries directly in one report section (``rank``, ``isotropy``), optionally only those of a
    view."""
    return tuple(m for m in METRICS if m.section == name and m.path.count(".") == 1 and "*" not in m.path
                 and (view_name is None or view_name in m.views))


def definitions(name: str) -> dict[str, str]:
    """``{field: definition}`` of one section's metrics (each report section's ``definitions``)."""
    return {m.name: m.definition for m in section(name) if m.kind == "metric"}


def numeric_leaves(doc: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted path of ``doc`` that holds a number (lists as ``*``), ``definitions`` skipped."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("definitions",):
                continue
            yield from numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(doc, list):
        for v in doc:
            yield from numeric_leaves(v, f"{prefix}.*")
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield prefix


def unknown_numbers(doc: dict[str, Any]) -> list[str]:
    """The numeric paths of a report document that the registry does not know (a test's and a
    developer's check: every reported number has an entry)."""
    schema = doc.get("schema") if isinstance(doc.get("schema"), str) else None
    return sorted({p for p in numeric_leaves(doc) if find(p, schema) is None})


def per_position() -> tuple[Metric, ...]:
    """The numbers a sequence report gives each position (``per_position.*.<name>``), in the registry's order:
    those a table, a figure and the report's check read."""
    return tuple(m for m in METRICS if m.document == "sequence" and m.path.startswith("per_position.*.")
                 and m.kind == "metric")

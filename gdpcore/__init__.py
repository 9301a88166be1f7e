"""gdpcore: the privacy-accounting core of gdp-audit (pure numerics: no Prefect, no file I/O).

Mechanism descriptions (:mod:`gdpcore.mechanisms`) are accounted with Google's dp_accounting PLDs
(:mod:`gdpcore.accounting`), turned into symmetric piecewise-linear f-DP trade-off curves (:mod:`gdpcore.curve`)
and reported with every number labelled as an upper bound, lower bound, estimate or exact value
(:mod:`gdpcore.report`). Closed forms live in :mod:`gdpcore.closed_form`.
"""

from importlib.metadata import PackageNotFoundError, version

from gdpcore.bayes_security import get_bayes_security_from_dpsgd, get_bayes_security_from_report
from gdpcore.calibration import (
    AdvantageCalibrationCost,
    CalibrationResult,
    advantage_calibration_cost,
    advantage_calibration_tpr_gap_bound,
    calibrate_noise,
    calibrate_sampling_rate,
    calibrate_steps,
    epsilon_for_advantage,
    fnr_target_from_accuracy,
    fnr_target_from_advantage,
    fnr_target_from_precision,
)
from gdpcore.claims import ClaimCheck, EpsilonReproduction, check_claim, get_epsilon_from_named_accountant
from gdpcore.closed_form import (
    get_advantage_from_gdp,
    get_beta_from_epsilon_delta,
    get_beta_from_gdp,
    get_beta_from_laplace,
    get_beta_from_randomized_response,
    get_delta_from_gdp,
    get_epsilon_from_gdp,
    get_mu_from_epsilon_delta,
    get_mu_from_pure_dp,
)
from gdpcore.divergence import delta_divergence, get_bayes_risk, get_delta_divergence, is_at_least_as_private
from gdpcore.engine import Budget, Provenance, certified_gap
from gdpcore.events import (
    dp_event_from_dict,
    dp_event_from_json,
    dp_event_to_dict,
    dp_event_to_json,
    from_dp_event,
)
from gdpcore.evidence import (
    EvidenceCheck,
    OneRunCheck,
    OneRunEvidence,
    RegistryAudit,
    ScoreEvidence,
    audit_registry,
    check_evidence,
    check_one_run,
    detectable_mu,
    evidence_from_scores,
    one_run_epsilon_lower,
    one_run_evidence,
    one_run_fdp_epsilon_lower,
    one_run_mu_lower,
    registry_confidence,
)
from gdpcore.gdpt import bracket_mu, get_delta_from_epsilon_delta, identify_gdp, implies
from gdpcore.grid import analyze_grid
from gdpcore.kinds import UnsupportedMechanismError
from gdpcore.kinds.curves import (
    PrivacyLossDistributionInput,
    PrivacyProfile,
    TradeoffCurve,
    from_pld,
    from_privacy_profile,
    from_tradeoff_curve,
)
from gdpcore.kinds.samplers import BallsInBinsGaussian, CyclicGaussian, ShuffledGaussian
from gdpcore.mechanisms import (
    ZCDP,
    Composed,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    KaryRandomizedResponse,
    Laplace,
    Mechanism,
    MixtureOfGaussians,
    RandomizedResponse,
    SampledWithoutReplacementGaussian,
    SelfComposed,
    SubsampledDiscreteLaplace,
    SubsampledGaussian,
    SubsampledLaplace,
    TreeAggregation,
    TruncatedSubsampledGaussian,
    content_hash_of_json,
    mechanism_from_dict,
)
from gdpcore.report import DEFAULT_ALPHA_MIN, GDP_COMPLETE_REGRET, PrivacyReport, analyze
from gdpcore.representations import REPRESENTATIONS, RepresentationRegret, get_regret, get_representation_table

# isort: off
# Seed capabilities reachable from the package (appended; see each module for its paper source).
from gdpcore.bayes_security import (
    check_attribute_inference_from_gradients,
    check_bayes_security_from_dpsgd,
    get_bayes_security_from_dpsgd_array,
)
from gdpcore.calibration import BlackBoxCalibration, calibrate_with_accountant
from gdpcore.divergence import (
    get_crossing_priors,
    get_plrv_moments,
    get_weighted_delta_divergence,
    is_approximately_dominating,
    predict_composition_dominance,
)
from gdpcore.gdpt import clip_and_rectify, refine_noise, refine_profile, subsample_profile
from gdpcore.guidance import fixed_point, regime_warning
from gdpcore.tuning import RepetitionDistribution, TuningBound, analyze_tuning, get_tuned_report_bound
# isort: on

try:
    __version__ = version("gdp-audit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = [
    "Budget",
    "Provenance",
    "certified_gap",
    "AdvantageCalibrationCost",
    "CalibrationResult",
    "ClaimCheck",
    "Composed",
    "DEFAULT_ALPHA_MIN",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "KaryRandomizedResponse",
    "MixtureOfGaussians",
    "SampledWithoutReplacementGaussian",
    "SubsampledDiscreteLaplace",
    "SubsampledLaplace",
    "TreeAggregation",
    "TruncatedSubsampledGaussian",
    "ZCDP",
    "EpsilonReproduction",
    "GDP_COMPLETE_REGRET",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "PrivacyReport",
    "REPRESENTATIONS",
    "RandomizedResponse",
    "RepresentationRegret",
    "SelfComposed",
    "SubsampledGaussian",
    "UnsupportedMechanismError",
    "__version__",
    "advantage_calibration_cost",
    "advantage_calibration_tpr_gap_bound",
    "analyze",
    "analyze_grid",
    "bracket_mu",
    "calibrate_noise",
    "calibrate_sampling_rate",
    "calibrate_steps",
    "check_claim",
    "delta_divergence",
    "dp_event_from_dict",
    "dp_event_from_json",
    "dp_event_to_dict",
    "dp_event_to_json",
    "epsilon_for_advantage",
    "fnr_target_from_accuracy",
    "fnr_target_from_advantage",
    "fnr_target_from_precision",
    "from_dp_event",
    "from_pld",
    "from_privacy_profile",
    "from_tradeoff_curve",
    "PrivacyLossDistributionInput",
    "PrivacyProfile",
    "TradeoffCurve",
    "get_advantage_from_gdp",
    "get_bayes_risk",
    "get_bayes_security_from_dpsgd",
    "get_bayes_security_from_report",
    "get_beta_from_epsilon_delta",
    "get_beta_from_gdp",
    "get_beta_from_laplace",
    "get_beta_from_randomized_response",
    "get_delta_divergence",
    "get_delta_from_epsilon_delta",
    "get_delta_from_gdp",
    "get_epsilon_from_gdp",
    "get_epsilon_from_named_accountant",
    "get_mu_from_epsilon_delta",
    "get_mu_from_pure_dp",
    "get_regret",
    "get_representation_table",
    "identify_gdp",
    "implies",
    "is_at_least_as_private",
    "content_hash_of_json",
    "mechanism_from_dict",
    "EvidenceCheck",
    "OneRunEvidence",
    "RegistryAudit",
    "ScoreEvidence",
    "audit_registry",
    "check_evidence",
    "detectable_mu",
    "evidence_from_scores",
    "one_run_epsilon_lower",
    "one_run_evidence",
    "one_run_fdp_epsilon_lower",
    "one_run_mu_lower",
    "OneRunCheck",
    "check_one_run",
    "registry_confidence",
    "BlackBoxCalibration",
    "calibrate_with_accountant",
    "check_attribute_inference_from_gradients",
    "check_bayes_security_from_dpsgd",
    "clip_and_rectify",
    "fixed_point",
    "get_bayes_security_from_dpsgd_array",
    "get_crossing_priors",
    "get_plrv_moments",
    "get_weighted_delta_divergence",
    "is_approximately_dominating",
    "predict_composition_dominance",
    "refine_noise",
    "refine_profile",
    "regime_warning",
    "subsample_profile",
    "BallsInBinsGaussian",
    "CyclicGaussian",
    "ShuffledGaussian",
    "RepetitionDistribution",
    "TuningBound",
    "analyze_tuning",
    "get_tuned_report_bound",
]

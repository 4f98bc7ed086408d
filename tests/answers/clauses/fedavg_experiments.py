"""Witnesses for Module 3, Part 6 (experiments and analysis): one wrong answer per broken clause."""

from __future__ import annotations


from tests.answers.clauses import existing
from trainsys.fedavg import experiments as ref
from trainsys.fedavg.server import FedAvgConfig

FIELDS = FedAvgConfig.__dataclass_fields__


def _known_fields(config):
    return {k: v for k, v in config.items() if k in FIELDS} if isinstance(config, dict) else config


# --- train_centralized_baseline --------------------------------------------------------------------------
def _central_popping_federation_fields(config):
    """Removes the ignored federation fields from the caller's dict ('there are no clients here')."""
    if isinstance(config, dict):
        for key in ("num_clients", "fraction", "epochs", "partition"):
            config.pop(key, None)
    return ref.train_centralized_baseline(config)


def _central_zero_batch_as_full(config):
    """B = config.batch_size or n_train: a batch size of 0 silently becomes one full batch."""
    if isinstance(config, dict) and config.get("batch_size", 10) == 0:
        config = {**config, "batch_size": None}
    return ref.train_centralized_baseline(config)


def _central_dropping_unknown_keys(config):
    """Keys that are not FedAvgConfig fields are silently dropped."""
    return ref.train_centralized_baseline(_known_fields(config))


# --- run_fedavg_iid / run_fedavg_non_iid ---------------------------------------------------------------
def _iid_setting_the_callers_partition(config):
    """config['partition'] = 'iid' on the caller's dict, then run it."""
    if isinstance(config, dict):
        config["partition"] = "iid"
        return ref.run_fedavg_iid(config)
    return ref.run_fedavg_iid(config)


def _non_iid_dropping_unknown_keys(config):
    """Keys that are not FedAvgConfig fields are silently dropped."""
    return ref.run_fedavg_non_iid(_known_fields(config))


# --- compute_non_iid_gap ---------------------------------------------------------------------------------
def _gap_annotating_rounds(iid_history, non_iid_history):
    """Writes each round's gap into the IID history's round dicts (handy for plotting)."""
    result = ref.compute_non_iid_gap(iid_history, non_iid_history)
    if isinstance(iid_history, list) and iid_history and isinstance(iid_history[0], dict) \
            and "test_accuracy" in iid_history[0]:
        for h, g in zip(iid_history, result["gap_mean"]):
            h["test_accuracy"] = h["test_accuracy"] - g  # 'normalised': the IID arm now equals the non-IID one
    return result


# --- rounds_to_target_vs_local_epochs / accuracy_vs_client_fraction ------------------------------------
def _r2t_setting_the_callers_epochs(config, epochs_list, target, seeds=(0, 1, 2)):
    """config['epochs'] = E on the caller's dict, one E after the other."""
    record = ref.rounds_to_target_vs_local_epochs(config, epochs_list, target, seeds)
    if isinstance(config, dict):
        config["epochs"] = list(epochs_list)[-1]
    return record


def _r2t_repeated_epochs(config, epochs_list, target, seeds=(0, 1, 2)):
    """A repeated E is run once (dict keys are unique) instead of being refused."""
    return ref.rounds_to_target_vs_local_epochs(config, list(dict.fromkeys(epochs_list)), target, seeds)


def _avf_setting_the_callers_fraction(config, fractions, seeds=(0, 1, 2)):
    """config['fraction'] = C on the caller's dict, one C after the other."""
    record = ref.accuracy_vs_client_fraction(config, fractions, seeds)
    if isinstance(config, dict):
        config["fraction"] = float(list(fractions)[-1])
    return record


WITNESSES = {
    "train_centralized_baseline": {
        "mutation": [existing("train_centralized_baseline", "torch.manual_seed(config.seed)"),
                     ("the federation fields popped from the caller's dict", _central_popping_federation_fields)],
        "failure modes": [("batch_size = 0 taken as the full batch", _central_zero_batch_as_full),
                          ("unknown keys dropped", _central_dropping_unknown_keys)],
        "metric that proves it correct": [
            existing("train_centralized_baseline", "trains on the held-out examples too"),
            existing("train_centralized_baseline", "trains on train + held-out"),
            existing("train_centralized_baseline", "the same shuffle every epoch"),
            existing("train_centralized_baseline", "one shuffle seed for every epoch"),
            existing("train_centralized_baseline", "records the training accuracy as test_accuracy"),
            existing("train_centralized_baseline", "momentum not passed"),
            existing("train_centralized_baseline", "config.epochs passes per 'round'"),
            existing("train_centralized_baseline", "final accuracy = best epoch"),
        ],
    },
    "run_fedavg_iid": {
        "mutation": [existing("run_fedavg_iid", "writes partition='iid' into the caller's dict"),
                     ("config['partition'] = 'iid' on the caller's dict", _iid_setting_the_callers_partition)],
        "failure modes": [existing("run_fedavg_iid", "unknown keys silently dropped")],
        "metric that proves it correct": [
            existing("run_fedavg_iid", "runs the config's partition as given"),
            existing("run_fedavg_iid", "run_fedavg(config) as given"),
            existing("run_fedavg_iid", "builds a default config and loses the caller's fields"),
            existing("run_fedavg_iid", "fresh default config with the caller's seed"),
            existing("run_fedavg_iid", "shards_per_client / alpha reset to the defaults"),
            existing("run_fedavg_iid", "progress forced off"),
            existing("run_fedavg_iid", "IID arm seeded seed + 1"),
        ],
    },
    "run_fedavg_non_iid": {
        "mutation": [existing("run_fedavg_non_iid", "writes partition='shards' into the caller's dict")],
        "failure modes": [("unknown keys dropped", _non_iid_dropping_unknown_keys)],
        "metric that proves it correct": [
            existing("run_fedavg_non_iid", "runs the config's partition as given (IID stays IID)"),
            existing("run_fedavg_non_iid", "run_fedavg(config) as given"),
            existing("run_fedavg_non_iid", "always shards, even when Dirichlet is asked for"),
            existing("run_fedavg_non_iid", "always Dirichlet ('"),
            existing("run_fedavg_non_iid", "IID -> shards with shards_per_client forced to 2"),
            existing("run_fedavg_non_iid", "alpha reset to the default for a shards run"),
        ],
    },
    "compute_non_iid_gap": {
        "sign": [existing("compute_non_iid_gap", "non-IID minus IID"),
                 existing("compute_non_iid_gap", "non - iid")],
        "mutation": [("the IID rounds' accuracies overwritten in place", _gap_annotating_rounds)],
        "failure modes": [
            existing("compute_non_iid_gap", "silently truncates to the shorter run"),
            existing("compute_non_iid_gap", "truncated to the shorter run"),
            existing("compute_non_iid_gap", "a round without test_accuracy raises KeyError"),
            existing("compute_non_iid_gap", "ragged runs left to NumPy"),
            existing("compute_non_iid_gap", "every argument error names non_iid_history"),
            existing("compute_non_iid_gap", "an empty history inside a list crashes"),
        ],
        "metric that proves it correct": [
            existing("compute_non_iid_gap", "population spread (ddof = 0) instead of the sample spread"),
            existing("compute_non_iid_gap", "population spread ('"),
            existing("compute_non_iid_gap", "unpaired spread"),
            existing("compute_non_iid_gap", "final gap from the best accuracies"),
            existing("compute_non_iid_gap", "best round minus best round"),
            existing("compute_non_iid_gap", "NumPy scalars"),
        ],
    },
    "rounds_to_target_vs_local_epochs": {
        "mutation": [("config['epochs'] written on the caller's dict", _r2t_setting_the_callers_epochs)],
        "failure modes": [("a repeated E run once", _r2t_repeated_epochs),
                          existing("rounds_to_target_vs_local_epochs", "True accepted in epochs_list"),
                          existing("rounds_to_target_vs_local_epochs", "target=True accepted"),
                          existing("rounds_to_target_vs_local_epochs", "NaN target accepted"),
                          existing("rounds_to_target_vs_local_epochs", "negative seeds accepted"),
                          existing("rounds_to_target_vs_local_epochs", "repeated seeds accepted"),
                          existing("rounds_to_target_vs_local_epochs", "a tuple epochs_list refused")],
        "metric that proves it correct": [
            existing("rounds_to_target_vs_local_epochs", "counts rounds from 0"),
            existing("rounds_to_target_vs_local_epochs", "rounds counted from 0"),
            existing("rounds_to_target_vs_local_epochs", "never sets epochs"),
            existing("rounds_to_target_vs_local_epochs", "one seed (config.seed)"),
            existing("rounds_to_target_vs_local_epochs", "a run that never reaches the target counts as"),
            existing("rounds_to_target_vs_local_epochs", "unreached runs counted as config.rounds"),
            existing("rounds_to_target_vs_local_epochs", "std_rounds with ddof=0"),
            existing("rounds_to_target_vs_local_epochs", "accuracy > target"),
        ],
    },
    "accuracy_vs_client_fraction": {
        "mutation": [("config['fraction'] written on the caller's dict", _avf_setting_the_callers_fraction)],
        "failure modes": [existing("accuracy_vs_client_fraction", "repeated fractions accepted"),
                          existing("accuracy_vs_client_fraction", "True accepted as a fraction"),
                          existing("accuracy_vs_client_fraction", "NaN fraction slips past"),
                          existing("accuracy_vs_client_fraction", "negative seeds accepted")],
        "metric that proves it correct": [
            existing("accuracy_vs_client_fraction", "never sets fraction"),
            existing("accuracy_vs_client_fraction", "the best round's accuracy instead of the final one"),
            existing("accuracy_vs_client_fraction", "best round's accuracy ('"),
            existing("accuracy_vs_client_fraction", "population spread (ddof = 0)"),
            existing("accuracy_vs_client_fraction", "population spread ('"),
            existing("accuracy_vs_client_fraction", "clients per round int(C * K)"),
            existing("accuracy_vs_client_fraction", "int(C * K) clients"),
            existing("accuracy_vs_client_fraction", "raw ceiling: 0.07 of 100"),
        ],
    },
}

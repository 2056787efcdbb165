"""The test-hosts spec reader (tests/hosts/hosts.py): a spec is a gossamer job
config whose world_size and network: section give the hosts, their islands
and rates; a good one gives its islands and tc rates, each bad one is
refused naming the file and the key."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import hosts  # noqa: E402

HERE = os.path.dirname(__file__)


def write(tmp_path, text):
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return str(p)


def test_the_shipped_specs_load():
    spec = hosts.load_spec(os.path.join(HERE, "two-islands.yaml"))
    assert spec.world_size == 8
    assert spec.islands == [4, 4]
    assert (spec.inside_rate, spec.between_rate, spec.delay_ms) == ("10gbit", "100mbit", 20)
    assert spec.network == {"islands": [[0, 1, 2, 3], [4, 5, 6, 7]], "inside_gbps": 10, "between_gbps": 0.1,
                            "between_delay_ms": 20}
    spec = hosts.load_spec(os.path.join(HERE, "smoke.yaml"))
    assert spec.islands == [2, 2]
    assert (spec.inside_rate, spec.between_rate, spec.delay_ms) == ("1gbit", "100mbit", 0)
    spec = hosts.load_spec(os.path.join(HERE, "two-hosts.yaml"))
    assert spec.islands == [1, 1]
    assert (spec.inside_rate, spec.between_rate) == ("10gbit", "10gbit")


def test_a_whole_job_config_is_a_spec_and_its_other_sections_are_ignored(tmp_path):
    spec = hosts.load_spec(write(tmp_path, (
        "world_size: 6\nseed: 7\nmodel:\n  kind: mlp\ntraining:\n  epochs: 3\n"
        "topology:\n  kind: bandwidth_roulette\n"
        "network:\n  islands: [[0, 1, 2], [3, 4, 5]]\n  inside_gbps: 2.5\n  between_gbps: 0.05\n")))
    assert spec.world_size == 6
    assert spec.islands == [3, 3]
    assert (spec.inside_rate, spec.between_rate) == ("2500mbit", "50mbit")


def test_left_out_keys_take_the_jobs_defaults(tmp_path):
    spec = hosts.load_spec(write(tmp_path, "training:\n  epochs: 1\n"))
    assert spec.world_size == 4
    assert spec.islands == [4]  # islands [] is one island of every rank
    assert spec.network == {"islands": [], "inside_gbps": 10, "between_gbps": 10, "between_delay_ms": 0}
    assert (spec.inside_rate, spec.between_rate, spec.delay_ms) == ("10gbit", "10gbit", 0)


def test_ranks_may_come_in_any_order_inside_an_island(tmp_path):
    spec = hosts.load_spec(write(tmp_path, "world_size: 5\nnetwork:\n  islands: [[1, 0], [4, 2, 3]]\n"))
    assert spec.islands == [2, 3]
    assert spec.network["islands"] == [[1, 0], [4, 2, 3]]  # passed on as written


@pytest.mark.parametrize(
    "gbps, rate",
    [(0.1, "100mbit"), (1, "1gbit"), (10, "10gbit"), (2.5, "2500mbit"), (0.0015, "1500kbit"),
     (1e-06, "1kbit"), (1000, "1000gbit"), (0.3333333333, "333333333.3bit"), (12.000001, "12000001kbit")],
)
def test_gbit_per_second_become_the_exact_tc_rate(gbps, rate):
    assert hosts.tc_rate(gbps) == rate


NET2 = "world_size: 2\nnetwork:\n"


@pytest.mark.parametrize(
    "text, where",
    [
        ("world_size: 0\n", "world_size: expected an integer"),
        ("world_size: two\n", "world_size: expected an integer"),
        ("world_size: 300\n", "network.islands: one island (islands empty) holds at most 250"),
        ("network: [1]\n", "network: expected a mapping"),
        (NET2 + "  islands: 3\n", "network.islands: expected a list"),
        ("world_size: 201\nnetwork:\n  islands: [" + ", ".join(f"[{r}]" for r in range(201)) + "]\n",
         "network.islands: expected 1 to 200 islands"),
        (NET2 + "  islands: [[0, 1], []]\n", "network.islands[1]: expected a list of 1 to 250 ranks"),
        (NET2 + "  islands: [[0, true]]\n", "network.islands[0][1]: expected a rank"),
        (NET2 + "  islands: [[0], [2]]\n", "network.islands[1][0]: rank 2 does not exist"),
        (NET2 + "  islands: [[0, 1], [1]]\n", "network.islands[1][0]: rank 1 is already in network.islands[0]"),
        (NET2 + "  islands: [[1]]\n", "network.islands: the islands must cover every rank exactly once"),
        ("world_size: 4\nnetwork:\n  islands: [[0, 2], [1, 3]]\n",
         "network.islands[0]: hosts are numbered island by island"),
        ("world_size: 4\nnetwork:\n  islands: [[2, 3], [0, 1]]\n", "island 0 must hold ranks 0..1"),
        (NET2 + "  inside_gbps: fast\n", "network.inside_gbps: expected a number of Gbit/s"),
        (NET2 + "  inside_gbps: 0\n", "network.inside_gbps: expected a number of Gbit/s"),
        (NET2 + "  inside_gbps: .inf\n", "network.inside_gbps"),
        (NET2 + "  between_gbps: 1x\n", "network.between_gbps: expected a number of Gbit/s"),
        (NET2 + "  between_gbps: -1\n", "network.between_gbps"),
        (NET2 + "  between_gbps: 2000\n", "network.between_gbps"),
        (NET2 + "  between_delay_ms: -1\n", "network.between_delay_ms: expected a number in [0, 60000]"),
        (NET2 + "  between_delay_ms: .nan\n", "network.between_delay_ms"),
        (NET2 + "  wan: 1\n", "network: unknown key(s) ['wan']"),
        ("network: [\n", "spec.yaml"),
        ("- 1\n", "expected a mapping"),
        ("", "expected a mapping"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_key(tmp_path, text, where):
    path = write(tmp_path, text)
    with pytest.raises(hosts.SpecError) as e:
        hosts.load_spec(path)
    assert path in str(e.value)
    assert where in str(e.value)


def test_a_missing_spec_names_the_file(tmp_path):
    with pytest.raises(hosts.SpecError, match="nothere.yaml"):
        hosts.load_spec(str(tmp_path / "nothere.yaml"))


def test_the_token_bucket_holds_a_millisecond_of_traffic_and_at_least_64_kib():
    assert hosts.burst("10gbit") == str(10**10 // 8 // 1000)
    assert hosts.burst("100mbit") == "65536"
    assert hosts.burst("1gbps") == str(10**9 // 1000)

"""The test-hosts spec reader (tests/hosts/hosts.py): a good spec gives its
islands and rates; each bad one is refused naming the file and the key."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import hosts  # noqa: E402


def write(tmp_path, text):
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return str(p)


def test_the_shipped_specs_load():
    here = os.path.dirname(__file__)
    islands, between = hosts.load_spec(os.path.join(here, "two-islands.yaml"))
    assert islands == [(4, "10gbit"), (4, "10gbit")]
    assert between == {"rate": "100mbit", "delay_ms": 20}
    islands, between = hosts.load_spec(os.path.join(here, "smoke.yaml"))
    assert [h for h, _ in islands] == [2, 2]
    assert between["delay_ms"] == 0


@pytest.mark.parametrize(
    "text, where",
    [
        ("islands: []\n", "'islands' must be a list"),
        ("islands:\n  - hosts: 0\n", "islands[0].hosts"),
        ("islands:\n  - hosts: 2\n    rate: fast\n", "islands[0].rate: 'fast' is not a tc rate"),
        ("islands:\n  - hosts: 2\n    colour: red\n", "islands[0]: expected keys"),
        ("islands:\n  - hosts: 2\nbetween_islands:\n  rate: 1x\n", "between_islands.rate"),
        ("islands:\n  - hosts: 2\nbetween_islands:\n  delay_ms: -1\n", "between_islands.delay_ms"),
        ("islands:\n  - hosts: 2\nwan: 1\n", "unknown key(s) ['wan']"),
        ("islands: [\n", "spec.yaml"),
        ("- 1\n", "expected a mapping"),
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

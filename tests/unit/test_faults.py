"""The fault injector is off by default, refused without the tests' consent, and parsed strictly."""

import pytest

from worker import faults


def test_off_by_default():
    assert faults.load({}) is faults.NONE and not faults.NONE.any


def test_refused_without_consent():
    with pytest.raises(faults.FaultsRefused, match="tests only"):
        faults.load({faults.ENV: "flip_bit=1"})
    with pytest.raises(faults.FaultsRefused, match="tests only"):
        faults.check_allowed({faults.ENV: "flip_bit=1", faults.CONSENT_ENV: "yes"})


def test_parsed_with_consent():
    f = faults.load({faults.ENV: "slow_compute=8, delay_op_ms=2.5,flip_bit=1", faults.CONSENT_ENV: "tests"})
    assert (f.slow_compute, f.delay_op_ms, f.flip_bit, f.hang) == (8.0, 2.5, 1, 0) and f.any


@pytest.mark.parametrize("text", ["nonsense=1", "flip_bit", "slow_compute=fast"])
def test_bad_fault_named(text):
    with pytest.raises(faults.FaultsRefused, match="RINGLEADER_FAULTS"):
        faults.parse(text)

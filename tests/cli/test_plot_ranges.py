"""Automatic histogram ranges: never below 0 for an observable in GeV or a count."""

from __future__ import annotations

from types import SimpleNamespace

from analysis.cli.plots import auto_range, nonnegative


def _obs(name, x):
    return SimpleNamespace(name=name, x=x, y=None, unit=None)


def test_nonnegative_observables():
    assert nonnegative(_obs("jet_pt", "Jet.pt"))
    assert nonnegative(_obs("lead", "jets[0].pt"))
    assert nonnegative(_obs("ht", "sum(jets.pt)"))
    assert nonnegative(_obs("m", "mass(jets[0], jets[1])"))
    assert nonnegative(_obs("n", "count(jets)"))
    assert not nonnegative(_obs("eta", "Jet.eta"))


def test_range_cut_at_zero_only_when_nonnegative():
    assert auto_range([-100.0, -20.0], [300.0, 250.0], nonnegative=True) == (0.0, 300.0)
    assert auto_range([-3.0], [3.0], nonnegative=False) == (-3.0, 3.0)

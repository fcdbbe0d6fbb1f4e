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


def test_automatic_range_is_cropped_to_the_observed_support():
    import hist
    import numpy as np

    from analysis.cli.plots import _FINE_BINS, crop_to_support

    def filled(values):
        h = hist.Hist(hist.axis.Regular(_FINE_BINS, 0.0, 400.0), storage=hist.storage.Weight())
        h.fill(values, weight=np.ones(len(values)))
        return h

    rng = np.random.default_rng(1)
    sig = filled(rng.uniform(100.0, 180.0, 5000))
    bkg = filled(rng.uniform(120.0, 200.0, 5000))
    tails = hist.Hist(hist.axis.Regular(_FINE_BINS, 0.0, 400.0), storage=hist.storage.Weight())
    tails.fill([5.0, 390.0], weight=[1e-8, 1e-8])  # a soft selection's far tails
    tails.fill(rng.uniform(110.0, 150.0, 100), weight=np.ones(100))
    (cut,) = crop_to_support([{"sig": sig, "bkg": bkg, "soft": tails}])
    edges = cut["sig"].axes[0].edges
    assert 95.0 <= edges[0] <= 100.0 and 200.0 <= edges[-1] <= 210.0
    assert len(edges) - 1 <= 40
    for name, h in (("sig", sig), ("bkg", bkg)):
        assert cut[name].values().sum() == h.values().sum()  # every entry in range

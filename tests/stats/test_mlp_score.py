"""The learned score (issue 18): an equinox MLP of per-object inputs, cut softly.

* At cut width 0 the selected jets' moments equal numpy's on the hard-cut selection,
  with the same network evaluated by numpy from the npz file's weights.
* Its gradient (weights and cut, reverse mode) equals central finite differences.
* The npz file holds data only; a file whose shapes do not match the configured
  network, a non-finite weight, a missing or extra key, a non-npz file: one line each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from analysis import stats
from analysis.errors import InputError
from analysis.select.weights import load_weights, save_weights
from analysis.soft import soft_cut

HIDDEN = (16, 16)


@pytest.fixture(scope="module")
def jets():
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 6, 300)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    n = int(offsets[-1])
    pt = rng.exponential(40.0, n) + 20.0
    eta = rng.uniform(-2.5, 2.5, n)
    btag = rng.uniform(0.0, 1.0, n)
    return offsets, pt, eta, btag


def numpy_mlp(arrays: dict, z: np.ndarray) -> np.ndarray:
    """The same network by hand in numpy (the reference): tanh hidden layers, linear out."""
    h = z
    n_layers = len(arrays) // 2
    for i in range(n_layers):
        h = h @ arrays[f"layers.{i}.weight"].T + arrays[f"layers.{i}.bias"]
        if i < n_layers - 1:
            h = np.tanh(h)
    return h[:, 0]


def test_width_zero_equals_numpy_on_the_hard_cut_selection(jets, tmp_path) -> None:
    offsets, pt, eta, btag = jets
    cols = [stats.Jagged(v, offsets) for v in (pt, eta, btag)]
    standard = stats.Standardisation(
        np.array([pt.mean(), 0.0, 0.5]), np.array([pt.std(), 1.4, 0.3])
    )
    path = save_weights(tmp_path / "score_b.npz", stats.mlp(3, hidden=HIDDEN, seed=1), standard=standard)
    net, st = load_weights(path, stats.mlp(3, hidden=HIDDEN, seed=99))  # other init: overwritten
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k.startswith("layers.")}
    z = (np.stack([pt, eta, btag], -1) - st.mean) / st.std
    ref_score = numpy_mlp(arrays, z)
    # Between two scores, not on one: the score of a value sitting exactly on the cut
    # differs by rounding between numpy, eager JAX and the compiled chunk program.
    ordered = np.sort(ref_score)
    cut = float(0.5 * (ordered[len(ordered) // 2] + ordered[len(ordered) // 2 + 1]))

    def fn(th):
        s = stats.score(th["net"], cols, standard=st)
        w = soft_cut(s.values, ">", th["cut"], 0.0)
        return {"pt": stats.moments(pt, weight=w), "n": jnp.sum(w)}

    got = stats.derive(fn, {"cut": cut, "net": net}, order=0).value
    np.testing.assert_allclose(np.asarray(stats.score(net, cols, standard=st).values), ref_score, rtol=1e-13, atol=1e-13)
    sel = pt[ref_score > cut]
    assert 0 < sel.size < pt.size
    assert float(got["n"]) == sel.size
    assert float(stats.mean(got["pt"])) == pytest.approx(sel.mean(), rel=1e-13)
    assert float(stats.var(got["pt"])) == pytest.approx(sel.var(), rel=1e-12)
    per_event = stats.score(net, cols, standard=st)
    assert isinstance(per_event, stats.Jagged)
    np.testing.assert_array_equal(np.asarray(per_event.offsets), offsets)


def test_score_gradient_matches_finite_differences(jets) -> None:
    offsets, pt, eta, btag = jets
    cols = [stats.Jagged(v, offsets) for v in (pt, eta, btag)]
    standard = stats.Standardisation(np.array([60.0, 0.0, 0.5]), np.array([40.0, 1.4, 0.3]))
    theta = {"cut": 0.0, "net": stats.mlp(3, hidden=HIDDEN, seed=4)}

    def fn(th):
        s = stats.score(th["net"], cols, standard=standard)
        w = soft_cut(s.values, ">", th["cut"], 0.3)
        return {"pt": stats.moments(pt, weight=w)}

    def run(th):  # three chunks of objects
        parts = []
        for a, b in ((0, 300), (300, 301), (301, len(pt))):
            sub = [stats.Jagged(c.values[a:b], np.array([0, b - a])) for c in cols]

            def f(t, sub=sub, a=a, b=b):
                s = stats.score(t["net"], sub, standard=standard)
                w = soft_cut(s.values, ">", t["cut"], 0.3)
                return {"pt": stats.moments(pt[a:b], weight=w)}

            parts.append(stats.derive(f, th))
        return sum(parts)

    f = stats.differentiable(run)
    assert f.mode_for(theta) == "reverse"
    grad = jax.grad(lambda th: stats.std(f(th)["pt"]))(theta)
    gflat, _ = ravel_pytree(grad)
    flat, unravel = ravel_pytree(theta)
    whole = lambda v: float(stats.std(stats.derive(fn, unravel(v), order=0).value["pt"]))  # noqa: E731
    rng = np.random.default_rng(0)
    h = 1e-4
    for _ in range(3):
        v = rng.normal(size=flat.size)
        v /= np.linalg.norm(v)
        fd = (whole(flat + h * v) - whole(flat - h * v)) / (2 * h)
        assert float(gflat @ v) == pytest.approx(fd, rel=1e-6, abs=1e-10)
    assert float(grad["cut"]) != 0.0


def test_bad_weight_files_are_one_line_each(tmp_path) -> None:
    like = stats.mlp(3, hidden=HIDDEN, seed=0)
    good = tmp_path / "good.npz"
    save_weights(good, like)
    with np.load(good) as data:
        arrays = {k: data[k] for k in data.files}

    def write(name, **changes):
        path = tmp_path / name
        out = {**arrays, **changes}
        np.savez(path, **{k: v for k, v in out.items() if v is not None})
        return path

    cases = [
        (write("shape.npz", **{"layers.1.weight": np.zeros((16, 8))}),
         r"shape.npz: layers.1.weight: expected shape \(16, 16\) for the configured network "
         r"\(inputs 3, hidden \[16, 16\]\), found \(16, 8\)"),
        (write("nan.npz", **{"layers.2.bias": np.array([np.nan])}),
         r"nan.npz: layers.2.bias\[0\] = nan: expected finite weights"),
        (write("missing.npz", **{"layers.0.bias": None}), r"missing.npz: missing key 'layers.0.bias'"),
        (write("extra.npz", **{"layers.3.weight": np.zeros(2)}), r"extra.npz: unexpected key 'layers.3.weight'"),
        (tmp_path / "absent.npz", r"absent.npz: no such weights file"),
    ]
    (tmp_path / "text.npz").write_text("not a zip")
    cases.append((tmp_path / "text.npz", r"text.npz: not a readable npz weights file"))
    np.savez(tmp_path / "object.npz", **{**arrays, "layers.0.bias": np.array([{"a": 1}], dtype=object)})
    cases.append((tmp_path / "object.npz", r"object.npz: not a readable npz weights file"))
    for path, message in cases:
        with pytest.raises(InputError, match=message) as err:
            load_weights(path, like)
        assert "\n" not in str(err.value)
    net, standard = load_weights(good, like)
    assert standard is None
    for a, b in zip(jax.tree_util.tree_leaves(net), jax.tree_util.tree_leaves(like), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="activation: expected one of"):
        stats.mlp(3, activation="swish!")
    with pytest.raises(ValueError, match="expected 3 input columns for this network, found 2"):
        stats.score(like, [np.zeros(2), np.zeros(2)])

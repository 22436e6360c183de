"""Reactant.jl's real output: every fixture packs, runs on both backends and matches a reference.

References are written here from the Julia source in each fixture's provenance (or, where the
repository gives none, from the computation the module performs), in NumPy or plain JAX, on
inputs the test generates. Reactant lowers Julia arrays with their axes reversed, so each
reference works on the MLIR tensors' (row-major) shapes.
"""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import FIXTURES, ROOT, needs_fixtures

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402

pytestmark = needs_fixtures
RNG = np.random.default_rng(42)


def normal(*shape, dtype=np.float32, scale=1.0):
    return (scale * RNG.standard_normal(shape)).astype(dtype)


def lux_lenet(x, w1, b1, w2, b2, d1, c1, d2, c2, d3, c3):
    # Lux's Conv is a true convolution (NNlib flips the kernel); Dense weights arrive as W^T.
    params = {
        "conv1": {"w": w1[:, :, ::-1, ::-1], "b": b1},
        "conv2": {"w": w2[:, :, ::-1, ::-1], "b": b2},
        "dense1": {"w": d1, "b": c1},
        "dense2": {"w": d2, "b": c2},
        "dense3": {"w": d3, "b": c3},
    }
    return [np.asarray(jax.jit(lenet5.lenet5)(params, x))]  # eagerly, 0.9 CPU-s of op compiles


def attractive_force(positions, masses, g=2.0):
    # compute_attractive_force: F[i, j] = G m_i m_j (sum of d) / |d|^2 with d = p_j - p_i, 0 on i == j.
    d = positions[None, :, :] - positions[:, None, :]
    r2 = (d * d).sum(-1)
    off = ~np.eye(len(masses), dtype=bool)
    inv = np.where(off, 1.0 / np.where(off, r2, 1.0), 0.0)
    return [(g * masses[:, None] * masses[None, :] * d.sum(-1) * inv).astype(np.float32)]


def durbin(r, y):
    # PolyBench durbin as this (lit-test) module computes it: each step's inner loops run one
    # index further than PolyBench's, with out-of-range indices clamped to 0 as dynamic_slice
    # does, and the inner sum starts from 1. Written from the module, there being no Julia source.
    y = y.copy()
    y[0] = alpha = -r[0]
    beta = np.float32(1)
    for k in range(1, len(r)):
        beta = (1 - alpha * alpha) * beta
        mirror = [max(k - i - 1, 0) for i in range(k + 1)]
        s = np.float32(1)
        for i, m in enumerate(mirror):  # in the module's order, in float32
            s = s + r[m] * y[i]
        alpha = -(r[k] + s) / beta
        y[: k + 1] = [y[i] + alpha * y[m] for i, m in enumerate(mirror)]
        y[k] = alpha
    return [y]


def comimager(_unused, gains, baselines, pixels, weights, image):
    """The Comrade.jl-style imager forward model of fixture 13, written from the computation
    the module performs (the Julia source is not in the repository): place the image in a
    128x128 grid, FFT, sample visibilities per baseline, weight by gains, scatter back, FFT,
    and read the image pixels."""
    rows, cols = (pixels - 1) % 128, ((pixels - 1) // 128) % 128  # Julia's column-major index
    grid = np.zeros((128, 128), complex)
    grid[rows, cols] = image.reshape(-1) * weights
    f = np.fft.fft2(grid)
    g0, g1 = gains[:, 0, :], gains[:, 1, :]  # (274, 10) each
    u, v = baselines[:, 0, :] - 1, baselines[:, 1, :] - 1
    w = f[u[:, :, None], v[:, None, :]]  # w[b, x, y] = F[u[b, x], v[b, y]]
    s = np.einsum("bx,by,bxy->b", g0, g1, w)
    back = 2 * np.conj(s)[:, None, None] * g0[:, None, :] * g1[:, :, None]  # [b, x, y]
    z = np.zeros((128, 128), complex)
    np.add.at(z, (u[:, None, :].repeat(10, 1), v[:, :, None].repeat(10, 2)), back)
    return [(np.fft.fft2(z)[rows, cols] * weights).reshape(64, 64)]


def comimager_inputs():
    return [
        normal(274, 2, dtype=np.float64),
        normal(274, 2, 10, dtype=np.float64),
        RNG.integers(1, 129, (274, 2, 10)),
        RNG.choice(128 * 128, 4096, replace=False) + 1,  # distinct pixels
        normal(4096, dtype=np.float64),
        (normal(64, 64, dtype=np.float64) + 1j * normal(64, 64, dtype=np.float64)),
    ]


def conditional(x):
    y = x + 1
    return [y, x, y, x] if y.sum() > 0 else [-y, y, y + 1, x]


CASES = {
    "01_lux_lenet_conv_dense": (
        lambda: [
            normal(4, 1, 28, 28),
            normal(6, 1, 5, 5),
            normal(6),
            normal(16, 6, 5, 5, scale=0.2),
            normal(16),
            normal(256, 128, scale=0.1),
            normal(128),
            normal(128, 84, scale=0.1),
            normal(84),
            normal(84, 10, scale=0.1),
            normal(10),
        ],
        lux_lenet,
    ),
    "02_reactant_docs_maybe_square_if_i1": (
        lambda: [np.array(True), np.float64(3.0)],
        lambda c, x: [x * x if c else x],
    ),
    "03_reactant_docs_add_n_aliasing_i64": (
        lambda: [RNG.integers(-50, 50, 10)],
        lambda x: [x + 10],
    ),
    "04_reactant_docs_partial_eval_add_i64_scalars": (
        lambda: [np.int64(7), np.int64(-3)],
        lambda a, b: [a + b],
    ),
    "05_reactant_docs_square_llvm_module_flags": (
        lambda: [normal(64, dtype=np.float64)],
        lambda x: [x * x],
    ),
    "06_reactant_docs_nbody_while_enzymexla_attrs": (
        lambda: [normal(1024, 3), normal(1024)],
        attractive_force,
    ),
    "07_reactant_docs_nbody_raised": (lambda: [normal(1024, 3), normal(1024)], attractive_force),
    "08_reactant_hlo_call_noarg_optbarrier": (lambda: [], lambda: [np.zeros(3, np.float32)]),
    "09_enzymejax_testffi_scalar_two_results": (
        lambda: [normal(2, 2), np.float32(2.5)],
        lambda m, s: [m.sum(), m * s],
    ),
    "10_enzymejax_reactant_regression_multi_alias": (
        lambda: [normal(6, 2), normal(2, 4)],
        lambda a, b: [b.T @ a.T.sum(axis=1), a, b],  # Julia: sum(y * x[:, i] for i in 1:6)
    ),
    "11_enzymejax_if_multi_result_alias": (lambda: [normal(10, 2, dtype=np.float64)], conditional),
    "12_enzymejax_durbin_nested_while": (lambda: [normal(64, scale=0.05), normal(64)], durbin),
    "13_enzymejax_comimager_complex_fft_gather": (comimager_inputs, comimager),
    "14_enzymejax_sdy_sharding": (
        lambda: [normal(16, 16, 16, dtype=np.float64) for _ in range(3)],
        lambda a, b, c: [a + b + c],
    ),
}

TOLERANCE = {
    "13_enzymejax_comimager_complex_fft_gather": 1e-9,
    "01_lux_lenet_conv_dense": 1e-4,
    "06_reactant_docs_nbody_while_enzymexla_attrs": 1e-4,
    "07_reactant_docs_nbody_raised": 1e-4,
    "12_enzymejax_durbin_nested_while": 1e-2,
}  # durbin amplifies rounding (and XLA's FMAs)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """name -> the fixture's bundle, packed once for every backend and test that reads it."""
    root = tmp_path_factory.mktemp("fixtures")
    done = {}

    def of(name):
        if name not in done:
            done[name] = hlobundle.load(
                hlobundle.pack(FIXTURES / f"{name}.mlir", None, root / name)
            )
        return done[name]

    return of


@pytest.fixture(scope="module")
def case():
    """name -> its inputs and its reference's results, once for every backend: the same inputs
    whichever tests ran before (durbin is ill-conditioned)."""
    done = {}

    def of(name):
        if name not in done:
            make_inputs, reference = CASES[name]
            RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state
            inputs = make_inputs()
            done[name] = inputs, reference(*inputs)
        return done[name]

    return of


# What IREE refuses among Reactant's modules, and why (SPEC.md 2.7).
IREE_REFUSED = {
    "13_enzymejax_comimager_complex_fft_gather": "IREE cannot compile this bundle: failed to legalize operation 'stablehlo.fft'",
    "14_enzymejax_sdy_sharding": "sharded over a device mesh",
}
# Runs out of memory on IREE: its runtime keeps every iteration of the 1024 x 1024 host-driven
# loop until the call returns (test_iree_out_of_memory_is_a_coded_error, in a process of its own).
IREE_OUT_OF_MEMORY = "06_reactant_docs_nbody_while_enzymexla_attrs"


# IREE compiles each fixture (about 0.4 s each): in the full suite only.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["enzyme", "xla", pytest.param("iree", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_runs_on_each_backend_and_matches_reference(packed, case, name, backend):
    bundle = packed(name)
    if backend == "iree":
        from hlobundle._run import _backends

        if not _backends.kind("iree").available():
            pytest.skip("the iree extra is not installed")
        if name in IREE_REFUSED:
            with pytest.raises(hlobundle.errors.BackendUnsupportedError, match=IREE_REFUSED[name]):
                bundle.function("iree")
            return
        if name == IREE_OUT_OF_MEMORY:
            pytest.skip("runs out of memory on IREE: test_iree_out_of_memory_is_a_coded_error")
    inputs, want = case(name)
    tol = TOLERANCE.get(name, 1e-6)
    got = bundle.function(backend, devices=1).call_flat(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == np.shape(w)
        atol = tol * max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(
            np.asarray(g), w, rtol=tol, atol=atol, err_msg=f"{name} on {backend}"
        )


def test_normalizations_are_recorded(packed):
    m = packed("06_reactant_docs_nbody_while_enzymexla_attrs").manifest
    assert "removed the attribute enzymexla.symmetric_matrix (1 use)" in m.module.normalizations
    assert any("renamed the module @'reactant_compute...'" in n for n in m.module.normalizations)
    m = packed("05_reactant_docs_square_llvm_module_flags").manifest
    assert m.module.normalizations[:2] == [
        "removed the module attribute llvm.data_layout",
        "removed the top-level op llvm.module_flags (it has no symbol name)",
    ]
    assert m.function == "square"


def test_aliasing_is_recorded(packed):
    m = packed("10_enzymejax_reactant_regression_multi_alias").manifest
    assert [r.aliases for r in m.results] == [None, 0, 1]
    m = packed("11_enzymejax_if_multi_result_alias").manifest
    assert [r.aliases for r in m.results] == [None, None, None, 0]


@pytest.mark.slow
@pytest.mark.subprocess
def test_fixture_15_packs_and_inspects_without_allocating(tmp_path):
    code = (
        "import hlobundle\n"
        f"out = hlobundle.pack({str(FIXTURES / '15_enzymejax_mhlo_sharding_bare_func.mlir')!r}, None, {str(tmp_path / 'b')!r})\n"
        "b = hlobundle.load(out); b.verify()\n"
        "from hlobundle._read._inspect import render, summarize; render(summarize(out))\n"
        "print(len(b.arguments), len(b.results), sum(__import__('math').prod(a.shape) * 8 for a in b.arguments))\n"
        # VmHWM: this process's peak RSS (ru_maxrss would include the pytest parent's, via fork)
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    counts, peak_kib = r.stdout.split("\n")[:2]
    n_args, n_results, _ = map(int, counts.split())
    assert (n_args, n_results) == (25, 16)
    assert int(peak_kib) < 400 * 1024  # far below the 1.2 GB the arguments would take


def test_fixture_16_is_refused(tmp_path):
    with pytest.raises(
        hlobundle.errors.ModuleError,
        match=r"the module is not portable: llvm.func at line 2, column 3; .*custom_call @enzymexla_compile_cpu at line 27",
    ) as e:
        hlobundle.pack(
            FIXTURES / "16_enzymejax_custom_call_enzymexla_compile_cpu.mlir", None, tmp_path / "b"
        )
    assert e.value.code == "MODULE_NOT_PORTABLE"
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_iree_out_of_memory_is_a_coded_error(packed):
    """IREE's runtime grows without bound on fixture 06's nested loop; under `--max-memory` the
    command ends with LIMIT_EXCEEDED and exit 1, not the out-of-memory killer or a crash."""
    import subprocess
    import sys

    from hlobundle._run import _backends

    if not _backends.kind("iree").available():
        pytest.skip("the iree extra is not installed")
    bundle = packed(IREE_OUT_OF_MEMORY)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hlobundle",
            "run",
            str(bundle.path),
            "--backend",
            "iree",
            "--max-memory",
            "1G",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr[-2000:]
    assert "error [LIMIT_EXCEEDED] IREE's runtime ran out of memory running the module" in r.stderr
    assert "Traceback" not in r.stderr

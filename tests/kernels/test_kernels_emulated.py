"""The CUDA kernels on the CPU: the unmodified ``kernels/*.cu`` compiled for the host
(:mod:`smallinit.tools.emulation`) and launched through :mod:`smallinit.kernels.launch`,
the host code the GPU runs, replaying every case of test_kernels_gpu.py (kernel_cases.py)
against the NumPy references. Outputs start as NaN bytes (``launch`` allocates them empty),
so an element a kernel does not write fails the comparison.

Also here: the emulator's own checks on small probe kernels, planted errors in copies of the
sources that these tests must catch, and (marked slow) the same replay with the library
built under AddressSanitizer and UBSan. They need a host C++ compiler and fail without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import kernel_cases as cases
import numpy as np
import pytest

from smallinit.kernels import launch
from smallinit.tools import emulation

SANITIZE = os.environ.get("SMALLINIT_EMULATION_SANITIZE") == "1"


@pytest.fixture(scope="module")
def dev():
    """The emulated device. Without a C++ compiler these tests fail rather than skip, so that
    `make test` cannot pass without checking the kernels (the suite needs one anyway:
    torch.compile's CPU backend builds C++)."""
    if emulation.compiler() is None:
        pytest.fail(
            "no C++ compiler ($CXX, g++ or c++): the CUDA kernels' emulation and "
            "torch.compile's CPU backend need one (Debian: apt install g++)"
        )
    return emulation.device(sanitize=SANITIZE)


def gram_on(dev):
    return lambda W: launch.cosine_gram(dev, W)


def step_on(dev):
    return lambda *args: launch.grouped_two_layer_step(dev, *args)


# ----------------------------------------------------------------------------- the GPU cases
@pytest.mark.parametrize("shape", cases.GRAM_SHAPES)
@pytest.mark.parametrize("dtype", cases.DTYPES)
def test_cosine_gram_emulated_vs_cpu(dev, shape, dtype):
    cases.check_cosine_gram(gram_on(dev), cases.gram_input(shape, dtype), dtype)


def test_cosine_gram_bf16_bits_emulated(dev):
    """bf16 handed over as uint16 bits (as gpu.py does for torch bf16), float32 out."""
    W = np.random.default_rng(1).standard_normal((3, 70, 33)).astype(np.float32)
    bits = emulation.bf16_bits(W)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.allclose(widened, W, rtol=2**-8)
    cases.check_cosine_gram(lambda _: launch.cosine_gram(dev, bits), widened, np.float32)


def library_gram_on(dev):
    return lambda W: launch.cosine_gram_library(dev, W)


@pytest.mark.parametrize("shape", cases.GRAM_SHAPES)
@pytest.mark.parametrize("dtype", cases.DTYPES)
def test_library_cosine_gram_emulated_vs_cpu(dev, shape, dtype):
    """The library path: the host product (NumPy's BLAS standing in for cuBLAS), then the
    emulated normalization kernel, within the same bound as the tiled kernel."""
    cases.check_cosine_gram(library_gram_on(dev), cases.gram_input(shape, dtype), dtype)


def test_library_cosine_gram_bf16_bits_emulated(dev):
    W = np.random.default_rng(1).standard_normal((3, 70, 33)).astype(np.float32)
    bits = emulation.bf16_bits(W)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    got = launch.cosine_gram_library(dev, bits)
    assert got.dtype == np.float32
    cases.check_cosine_gram(lambda _: got, widened, np.float32)


@pytest.mark.parametrize(
    ("act", "dtype", "per_network", "d"), cases.GROUPED_CASES, ids=cases.GROUPED_IDS
)
def test_grouped_step_emulated_vs_cpu(dev, act, dtype, per_network, d):
    cases.check_grouped_step(step_on(dev), cases.grouped_inputs(dtype, per_network, d), act)


def test_grouped_step_emulated_no_bias_empty_batch_and_cpu_fallback(dev):
    cases.check_no_bias_empty_batch_and_cpu_fallback(step_on(dev))


def test_threads_in_reverse_order_agree():
    """The schedule is a choice: running each block's threads from the last one down gives
    the same values within the bounds."""
    rev = emulation.device(sanitize=SANITIZE, order=1)
    cases.check_cosine_gram(gram_on(rev), cases.gram_input((3, 65, 17), np.float64), np.float64)
    for act, d in (("x2tanh", 17), ("relu", 5)):
        cases.check_grouped_step(step_on(rev), cases.grouped_inputs(np.float32, True, d), act)


def test_batch_beyond_the_grid_limit_is_launched_in_chunks(dev, monkeypatch):
    monkeypatch.setattr(launch, "MAX_GRID_Z", 2)
    cases.check_cosine_gram(gram_on(dev), cases.gram_input((5, 70, 9), np.float32), np.float32)


def test_grouped_launch_limit_counts_the_static_shared_memory():
    """n values of dynamic shared memory plus the kernel's static red[32] must fit 48 KiB."""
    for tname, size in (("float", 4), ("double", 8)):
        n = launch.SHARED_LIMIT // size - launch.GS_STATIC_SHARED
        fits = launch.grouped_launch(3, n, 5, tname)
        assert fits is not None and fits.shared_mem == n * size
        assert fits.shared_mem + launch.GS_STATIC_SHARED * size == launch.SHARED_LIMIT
        assert launch.grouped_launch(3, n + 1, 5, tname) is None
    assert launch.grouped_launch(3, 9, 33, "double") is None  # past every DMAX of double
    assert launch.grouped_launch(3, 9, 33, "float").block == (128,)


# ----------------------------------------------------------------------------- the emulator
PROBE = """
__global__ void block_sum(float* out) {
    __shared__ float total;
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    atomicAdd(&total, float(threadIdx.x));
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
__global__ void half_warp_shuffle(float* out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffu, float(threadIdx.x), 1, 16);
}
__global__ void read_before_write(float* out) {
    __shared__ float s[64];
    if (blockIdx.x == 0) s[threadIdx.x] = 1;
    extern __shared__ float dyn[];
    out[blockIdx.x * 2 * blockDim.x + threadIdx.x] = s[threadIdx.x];
    out[(blockIdx.x * 2 + 1) * blockDim.x + threadIdx.x] = dyn[threadIdx.x];
}
__global__ void divergent_barrier(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncthreads();
}
__global__ void lane_returned(float* out) {
    if (threadIdx.x == 31) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}
__global__ void deadlock(float* out) {
    if (threadIdx.x == 0) __syncthreads();
    else out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}
__global__ void takes_double(const double* in, double* out, int n) { out[0] = in[0] + n; }
"""
PROBES = [
    "block_sum",
    "half_warp_shuffle",
    "read_before_write",
    "divergent_barrier",
    "lane_returned",
    "deadlock",
    "takes_double",
]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    (root / "probe.cu").write_text(PROBE)
    return emulation.Module(emulation.build("probe.cu", root=root, exprs=PROBES, sanitize=SANITIZE))


def test_atomics_barriers_and_shuffles_compute_what_cuda_does(probe):
    for order in (0, 1):
        probe.order = order
        out = np.zeros(3, np.float32)
        probe.get_function("block_sum")((3,), (256,), (out,))
        assert out.tolist() == [256 * 255 / 2] * 3
        out = np.zeros(32, np.float32)
        probe.get_function("half_warp_shuffle")((1,), (32,), (out,))
        assert out[:16].tolist() == list(range(1, 16)) + [15]  # lane 15's source is past the width
    probe.order = 0


def test_shared_memory_is_garbage_at_every_block(probe):
    out = np.zeros(4 * 64, np.float32)
    probe.get_function("read_before_write")((2,), (64,), (out,), shared_mem=256)
    static0, dyn0, static1, dyn1 = out.reshape(4, 64)
    assert (static0 == 1).all()  # written by this block before it read it
    assert np.isnan(dyn0).all() and np.isnan(static1).all() and np.isnan(dyn1).all()


@pytest.mark.parametrize(
    ("name", "block", "message"),
    [
        ("divergent_barrier", 32, "divergent __syncthreads"),
        ("lane_returned", 32, "which has returned"),
        ("deadlock", 32, "deadlock"),
        ("half_warp_shuffle", 8, "past the block's last thread"),
    ],
)
def test_the_emulator_refuses_what_cuda_leaves_undefined(probe, name, block, message):
    with pytest.raises(emulation.EmulationError, match=message):
        probe.get_function(name)((1,), (block,), (np.zeros(32, np.float32),))


def test_launches_and_arguments_are_checked(probe):
    k = probe.get_function("takes_double")
    src, out = np.ones(1), np.zeros(1)
    k((1,), (1,), (src, out, np.int32(2)))
    assert out[0] == 3
    with pytest.raises(emulation.EmulationError, match="argument 0: the kernel takes cf8"):
        k((1,), (1,), (src.astype(np.float32), out, np.int32(2)))
    with pytest.raises(emulation.EmulationError, match="argument 2: the kernel takes i4"):
        k((1,), (1,), (src, out, np.int64(2)))
    with pytest.raises(emulation.EmulationError, match="read-only"):
        k((1,), (1,), (src, np.broadcast_to(out, (1,)), np.int32(2)))
    with pytest.raises(emulation.EmulationError, match="48 KiB"):
        k((1,), (1,), (src, out, np.int32(2)), shared_mem=48 * 1024 + 1)
    with pytest.raises(emulation.EmulationError, match="not a valid CUDA block"):
        k((1,), (1025,), (src, out, np.int32(2)))


# ----------------------------------------------------------------------------- planted errors
def _gram_cases(dev):
    for shape in cases.GRAM_SHAPES:
        for dtype in cases.DTYPES:
            yield lambda s=shape, t=dtype: cases.check_cosine_gram(
                gram_on(dev), cases.gram_input(s, t), t
            )


def _library_gram_cases(dev):
    for shape in cases.GRAM_SHAPES:
        for dtype in cases.DTYPES:
            yield lambda s=shape, t=dtype: cases.check_cosine_gram(
                library_gram_on(dev), cases.gram_input(s, t), t
            )


def _grouped_cases(dev):
    for act, dtype, per_network, d in cases.GROUPED_CASES:
        yield lambda a=act, t=dtype, p=per_network, k=d: cases.check_grouped_step(
            step_on(dev), cases.grouped_inputs(t, p, k), a
        )


# (file, text, replacement, cases it must fail)
PLANTED = {
    "grouped-no-barrier-after-forward": (
        "grouped_step.cu",
        "    __syncthreads();\n\n    // outputs",
        "\n    // outputs",
        _grouped_cases,
    ),
    "grouped-accumulator-off-by-one": (
        "grouped_step.cu",
        "for (int i = threadIdx.x; i < n; i += blockDim.x) E[i] = T(0);",
        "for (int i = threadIdx.x; i < n - 1; i += blockDim.x) E[i] = T(0);",
        _grouped_cases,
    ),
    "grouped-grad-a-not-written": (
        "grouped_step.cu",
        "        ga[k] = c * sa;\n",
        "",
        _grouped_cases,
    ),
    "gram-row-norm-off-by-one": (
        "cosine_gram.cu",
        "for (int j = lane; j < d; j += 32)",
        "for (int j = lane; j < d - 1; j += 32)",
        _gram_cases,
    ),
    "gram-mirror-tile-not-written": (
        "cosine_gram.cu",
        "const bool mirror = blockIdx.y != blockIdx.x;",
        "const bool mirror = false;",
        _gram_cases,
    ),
    "normalize-row-norm-for-the-column": (
        "gram_normalize.cu",
        "rinv[b * m + j]",
        "rinv[b * m + i]",
        _library_gram_cases,
    ),
    "normalize-last-element-skipped": (
        "gram_normalize.cu",
        "k < total;",
        "k < total - 1;",
        _library_gram_cases,
    ),
    "tile-no-barrier-before-next-slab": (
        "tile_gemm.cuh",
        "        }\n        __syncthreads();\n    }\n}",
        "        }\n    }\n}",
        _gram_cases,
    ),
}


def plant(root: Path, file: str, text: str, replacement: str) -> Path:
    """A copy of the kernel sources with one edit (the text must occur exactly once)."""
    for src in launch.HERE.glob("*.cu*"):
        shutil.copy(src, root / src.name)
    body = (root / file).read_text()
    assert body.count(text) == 1, f"{text!r} does not occur exactly once in {file}"
    (root / file).write_text(body.replace(text, replacement))
    return root


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_error_fails_the_replay(tmp_path, name):
    file, text, replacement, replay = PLANTED[name]
    bad = emulation.device(plant(tmp_path, file, text, replacement))
    failures = []
    for case in replay(bad):
        try:
            case()
        except (AssertionError, emulation.EmulationError) as err:
            failures.append(err)
            break
    assert failures, f"the planted error {name!r} passed every case"


# ----------------------------------------------------------------------------- sanitizers
@pytest.mark.slow
def test_the_replay_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    """Every test above but the planted errors, with the library built under ASan and UBSan
    (no report, exit 0); and the sanitizers are live: an out-of-bounds read planted in a
    copy of cosine_gram.cu is reported."""
    env = {**os.environ, **emulation.sanitizer_env(), "SMALLINIT_EMULATION_SANITIZE": "1"}
    here = Path(__file__).resolve()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(here),
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-m",
            "not slow",
            "-k",
            "not planted",
        ],
        env=env,
        cwd=here.parents[2],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "passed" in out and "skipped" not in proc.stdout.splitlines()[-1], out[-2000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error" not in out, out[-6000:]

    root = plant(
        tmp_path,
        "cosine_gram.cu",
        "for (int j = lane; j < d; j += 32)",
        "for (int j = lane; j <= d; j += 32)",
    )
    script = textwrap.dedent(f"""
        import numpy as np
        from smallinit.kernels import launch
        from smallinit.tools import emulation
        W = np.random.default_rng(0).standard_normal((130, 7)).astype(np.float32)
        launch.cosine_gram(emulation.device({str(root)!r}, sanitize=True), W)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0 and "heap-buffer-overflow" in proc.stderr, proc.stderr[-4000:]

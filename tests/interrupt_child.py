"""A ``trtspec build`` child for tests/test_builder_interrupt.py that announces where it is.

``python interrupt_child.py STAGE MARKER TARGET DRAFT OUT`` builds TARGET + DRAFT into OUT (fp8, or
int4_awq for ``awq_search``) and writes MARKER when it reaches STAGE, then carries on with the build:

* ``recipe``: inside the recipe resolver (which then waits: the parent signals there);
* ``calibration``: at the 3rd batch of Model-Optimizer's (max) calibration pass;
* ``awq_search``: at the 3rd batch of int4_awq's second pass (awq_lite's search over the alphas);
* ``export``: on entry to ``export_hf_checkpoint`` (which then waits before writing).

On the way out it writes ``MARKER.done`` with the time the exception reached the top, so the
parent can tell the build's own cleanup from the interpreter's shutdown.

``python interrupt_child.py cli-calibration MARKER -- ARGS...`` runs ``trtspec ARGS...`` (the
command line, with its own exit codes and messages) with the same calibration marker.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

STAGE, MARKER = sys.argv[1], Path(sys.argv[2])
if STAGE.startswith("cli-"):
    CLI_ARGS = sys.argv[sys.argv.index("--") + 1:]
else:
    TARGET, DRAFT, OUT = map(Path, sys.argv[3:6])


def announce() -> None:
    MARKER.write_text(f"{time.time()}\n")


def wait_for_signal(seconds: float = 120.0) -> None:
    """Sleep in short slices (a signal interrupts the sleep); the parent signals within seconds."""
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.05)


def patch_calibration(pass_index: int) -> None:
    import trtspec.builder.calib as calib

    original = calib.forward_loop

    def forward_loop(batches, device, vocab_size, progress=None):
        inner = original(batches, device, vocab_size, progress)
        seen = {"passes": 0}

        def loop(model):
            seen["passes"] += 1
            if seen["passes"] != pass_index:
                return inner(model)
            state = {"n": 0}

            def tick():
                state["n"] += 1
                if state["n"] == 3:
                    announce()
                if progress is not None:
                    progress()
            return original(batches, device, vocab_size, tick)(model)

        loop.num_batches = inner.num_batches
        return loop

    calib.forward_loop = forward_loop


def patch_export() -> None:
    import modelopt.torch.export as mexport

    original = mexport.export_hf_checkpoint

    def export_hf_checkpoint(*args, **kwargs):
        announce()
        wait_for_signal()
        return original(*args, **kwargs)

    mexport.export_hf_checkpoint = export_hf_checkpoint


def resolver(spec, **kw):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_builder_configs import FakeRecipe

    if STAGE == "recipe":
        announce()
        wait_for_signal()
    return FakeRecipe()


def main_cli() -> int:
    from trtspec.cli import main as trtspec

    patch_calibration(1)
    trtspec(CLI_ARGS)
    return 0


def main() -> int:
    from trtspec.builder import pipeline
    from trtspec.builder.options import BuildOptions

    if STAGE == "calibration":
        patch_calibration(1)
    elif STAGE == "awq_search":
        patch_calibration(2)
    elif STAGE == "export":
        patch_export()
    # AWQ (int4_awq: a caching pass, then the search over 11 alphas per batch) only where the stage is
    # its search; elsewhere FP8's single max-calibration pass. Enough batches that the pass outlasts
    # the parent's reaction (~0.05 s) many times over, few enough to reach export quickly.
    quant = "int4_awq" if STAGE == "awq_search" else "fp8"
    samples = {"calibration": 400, "awq_search": 64}.get(STAGE, 2)
    opts = BuildOptions(target=TARGET, draft=DRAFT, out=OUT, use_cache=False, calib_samples=samples,
                        calib_seq_len=64, quant=quant)
    try:
        pipeline.build(opts, quiet=True, recipe_resolver=resolver)
    except KeyboardInterrupt as e:
        from trtspec.builder.interrupt import exit_code

        Path(f"{MARKER}.done").write_text(f"{time.time()}\n{type(e).__name__}: {e}\n")
        return exit_code(e)
    return 0


if __name__ == "__main__":
    sys.exit(main_cli() if STAGE.startswith("cli-") else main())

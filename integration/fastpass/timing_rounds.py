"""Timing helpers shared by the calibration's measurements: the fastest of interleaved rounds, and a step
counter that tells a caller's progress bar."""


def fastest_of_rounds(passes, repeats, tick=None, warm_up=True):
    """Fastest seconds of each zero-argument callable in ``passes`` (each returns the seconds it took): one
    round warms every shape up (unless not ``warm_up``), then ``repeats`` interleaved rounds, so that a burst
    of load from another process neither bends the measured shape nor lands on one entry only. ``tick()``, if
    given, after each of the ``len(passes) * (repeats + warm_up)`` calls."""
    best = [float("inf")] * len(passes)
    for round_ in range(repeats + bool(warm_up)):
        for i, run in enumerate(passes):
            elapsed = run()
            if round_ or not warm_up:
                best[i] = min(best[i], elapsed)
            if tick is not None:
                tick()
    return best


def step_counter(progress, total):
    """A zero-argument callable that reports one more of ``total`` steps as ``progress(done, total)``; None
    where ``progress`` is None. How a measurement that takes seconds tells a caller's progress bar."""
    if progress is None:
        return None
    done = 0

    def tick():
        nonlocal done
        done += 1
        progress(done, total)

    return tick

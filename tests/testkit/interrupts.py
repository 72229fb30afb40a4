"""Trainer callbacks shared by the tests: an interrupt at a chosen step."""

from transformers import TrainerCallback


class InterruptAt(TrainerCallback):
    """Raises KeyboardInterrupt as step ``step + 1`` begins, as a Ctrl-C during that step's generation would."""

    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt

"""Serving models: one engine iteration priced from the stage model (``iteration``), the
steady state of in-flight batching at a closed-loop concurrency (``steady``), and the
validation / calibration against measured serving points (``validate``, ``calibrate``)."""

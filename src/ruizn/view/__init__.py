"""Looking at a run: its timeline (a pure projection of the log) and the page. Its spans
(`ruizn.spans`) are in the core, since the OTLP exporter (`effects.telemetry`) sends them too."""

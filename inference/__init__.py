"""Inference room: the fleet client (`inference.fleet.FleetClient`, a `ModelClient`), the
embedded engine server (`inference.engine.server`), launch helpers (`inference.launch`) and the
wire schemas (`inference.wire`). Contracts live in `inference.protocol`. Nothing heavy here."""

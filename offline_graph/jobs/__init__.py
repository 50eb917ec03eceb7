"""Ray jobs: episode recording, the conversion job, run-wide accounting, the Ray Data source."""

"""How apps drive the updater: RuntimeUpdater, jobs, the scheduled check, doctor."""

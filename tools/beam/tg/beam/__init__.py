"""tg-beam: BEAM search for the fastest way to run one kernel."""

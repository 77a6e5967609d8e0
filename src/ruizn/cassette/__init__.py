"""The cassette: a recorded run replayed as the model (`model`, `hooks`), compared with another
(`diff`) and driven again (`rerun`). What a recording holds (`ruizn.recording`) and where a
run may be forked (`ruizn.fork`) are pure, in the core."""

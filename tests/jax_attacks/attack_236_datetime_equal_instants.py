SPEC = {"variants": {"a": {"args": ["0"]}, "b": {"args": ["1"]}}, "order": "abba"}
# equal aware datetimes (same instant) with different wall-clock hour / naive datetimes differing only in fold
import sys
from datetime import datetime, timezone, timedelta
import numpy as np, jax, jax.numpy as jnp
if sys.argv[1] == "0":
    DT = datetime(2020, 1, 1, 12, tzinfo=timezone.utc)
    N = datetime(2020, 1, 1, 1, 30, fold=0)
else:
    DT = datetime(2020, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    N = datetime(2020, 1, 1, 1, 30, fold=1)
@jax.jit
def f(x):
    return x + DT.hour + 100 * N.fold
print("RESULT", np.asarray(f(np.zeros(2, np.float32))).tolist())

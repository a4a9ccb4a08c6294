"""A function of NumPy arrays, for ``tests/test_torch_dynamo.py``: Dynamo reads each array
as a new tensor every time it looks, which torch's own caching_precompile mode could not guard
(it raised into the program). Prints one JSON line: the result, the frames Dynamo traced,
compilecache's ``torch.dynamo.*`` counters."""

import json

import numpy as np
import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config


def rounded(x: np.ndarray) -> np.ndarray:
    return np.round(x)


def main() -> None:
    import compilecache

    functorch_config.strict_autograd_cache = True
    compiled = torch.compile(rounded, backend="inductor")
    x = np.array([[1.2, 2.7], [-3.5, 4.5]], dtype=np.float32)
    first = compiled(x).tolist()
    torch._dynamo.reset()
    again = compiled(x + 1).tolist()
    session = compilecache.active()
    stats = session.stats() if session is not None else {}
    ours = {k.removeprefix("torch.dynamo."): v for k, v in stats.items() if "dynamo" in k}
    line = {"result": [first, again], "frames": int(counters["frames"]["total"]), "ours": ours}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

"""The real-model zoo's Hugging Face decoders (experiments.models.real_zoo): GPT-2 and Llama at 2-layer
tiny configs with random weights import through ``import_module`` and ``import_training_step``
(their attention masks read a tensor's value under real tracing, so the capture traces them on
fake tensors) and the compiled programs match eager torch and a float64 run of the model."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the real zoo needs torch: pip install -e '.[models]'")
pytest.importorskip("transformers", reason="the real zoo needs transformers: pip install -e '.[models]'")

from experiments.models.real_zoo import REAL_ZOO, float64_outputs  # noqa: E402


@pytest.mark.parametrize("mode", ["forward", "training"])
@pytest.mark.parametrize("name", ["hf_gpt2", "hf_llama"])
def test_decoder_imports_and_matches_torch(name, mode):
    model = REAL_ZOO[name](True)
    program = getattr(model, mode)()
    assert program.provenance["tracing"] == "fake"
    got = program.compile()(*program.arguments())
    got = got if isinstance(got, tuple) else (got,)
    reference = float64_outputs(model, mode)
    assert len(got) == len(program.expected) == len(reference)
    for i, (g, eager, exact) in enumerate(zip(got, program.expected, reference)):
        scale = max(float(np.abs(exact).max()), 1e-6)
        np.testing.assert_allclose(g, eager, rtol=0, atol=1e-5 * scale, err_msg=f"output {i} vs eager float32")
        np.testing.assert_allclose(g, exact, rtol=0, atol=1e-5 * scale, err_msg=f"output {i} vs float64")

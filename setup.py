"""Build of the optional C extension ``fastdata.decode._jpeg`` (JPEG decoding with libjpeg-turbo:
corrupt data reported, regions decoded alone).

Everything else is in pyproject.toml. The extension needs libjpeg-turbo's headers and library
(``libjpeg-turbo8-dev`` / ``libjpeg62-turbo-dev`` / ``libjpeg-turbo-devel``); without them the
build goes on without it (``optional=True``) and fastdata decodes JPEGs with OpenCV alone,
which does not detect corrupt entropy-coded data (see the images guide).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "fastdata.decode._jpeg",
            ["src/fastdata/decode/_jpeg.c"],
            libraries=["jpeg"],
            optional=True,
        ),
        # torch's weights are computed in plain double arithmetic: no contraction into fused
        # multiply-adds, no fast-math reassociation (CFLAGS could ask for either)
        Extension(
            "fastdata.decode._resample",
            ["src/fastdata/decode/_resample.c"],
            extra_compile_args=["-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
    ]
)

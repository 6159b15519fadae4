#!/bin/sh
# run.sh: the exact command line of the training run (see README.md). Extra flags pass through.
# OpenBLAS only for this process: Debian's torch 1.13 calls the system libblas, which is the
# slow reference BLAS unless libopenblas0-pthread is installed and selected.
set -e
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread
export OPENBLAS_NUM_THREADS=2
exec nice -n 10 /usr/bin/python3 train.py "$@"

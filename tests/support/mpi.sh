# shellcheck shell=bash
# The MPI tests' one skip: mpi_require PROG ends the TAP test with a
# skip (exit 0) when this build has no MPI program (PROG is "none":
# built with -Dmpi=disabled, or no MPI installed) or mpirun is missing.
mpi_require() {
	if [ "$1" = none ]; then
		echo "1..0 # SKIP built without MPI (-Dmpi=disabled, or no MPI installed)"
		exit 0
	fi
	command -v mpirun >/dev/null || {
		echo "1..0 # SKIP mpirun is missing (apt-get install openmpi-bin)"
		exit 0
	}
}

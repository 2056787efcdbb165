// Where a rank finds its place in a job started by someone else's launcher:
// torchrun, Open MPI's mpirun, MPICH's Hydra or Slurm's srun.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace gossamer {

/// A rank's place in a job, read from its launcher's environment variables.
struct LaunchEnvironment {
  /// Who started the job: "torchrun" (RANK, WORLD_SIZE and TORCHELASTIC_*),
  /// "env" (RANK and WORLD_SIZE set by hand), "mpirun" (Open MPI), "hydra"
  /// (MPICH) or "srun" (Slurm).
  std::string launcher;
  int rank = 0;       ///< This rank, in [0, worldSize).
  int worldSize = 1;  ///< Ranks in the job (1 .. kMaxWorldSize).
  /// The rendezvous: "tcp://HOST:PORT" (rank 0 serves the store there) or a
  /// directory on a file system all ranks see (FileStore).
  std::string rendezvous;
};

/// Looks up one environment variable; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment (getenv).
EnvLookup processEnvironment();

/// This process's parent as "<pid>-<start time in clock ticks since boot>"
/// (from /proc; unique on the host while it runs, also across pid reuse),
/// "" if it cannot be read.
std::string parentProcessId();

/// Reads the rank and world size from the first launcher whose variables are
/// set, in this order: RANK / WORLD_SIZE (torchrun, or by hand),
/// OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK /
/// PMI_SIZE (MPICH Hydra), SLURM_PROCID / SLURM_NTASKS (srun).
///
/// The rendezvous, in this order:
///   1. GOSSAMER_RENDEZVOUS: tcp://HOST:PORT or a directory;
///   2. MASTER_ADDR and MASTER_PORT: tcp://MASTER_ADDR:MASTER_PORT, or
///      MASTER_PORT + 1 under torchrun, whose agent holds MASTER_PORT for its
///      own store (TORCHELASTIC_USE_AGENT_STORE=True);
///   3. srun over several nodes (SLURM_NNODES above 1): tcp://FIRST:PORT,
///      FIRST the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST),
///      PORT 29500 + (7 * SLURM_JOB_ID + SLURM_STEP_ID) mod 10000;
///   4. a job on one host with a job id (Open MPI's PMIX_NAMESPACE, and
///      mpirun's random per-job key OMPI_MCA_orte_precondition_transports
///      when set, when OMPI_COMM_WORLD_LOCAL_SIZE equals the world size; Slurm's
///      SLURM_JOB_ID and SLURM_STEP_ID when SLURM_NNODES is 1; under MPICH's
///      Hydra, when MPI_LOCALNRANKS equals the world size, the parent
///      process, the host's hydra_pmi_proxy, as `parentProcess` names it):
///      the directory ${TMPDIR:-/tmp}/gossamer-rendezvous-<launcher>-<job id>.
/// A job of one rank needs none: its rendezvous is then "" when none of
/// these is set.
///
/// @returns nullopt when no launcher's variables are set.
/// @throws InvalidArgument naming the variable when a value is malformed
///         (not an integer, rank outside [0, world size), port outside
///         1..65535) or when a job of more than one rank has no rendezvous
///         (the message says which variables to set).
std::optional<LaunchEnvironment> discoverLaunch(
    const EnvLookup& env = processEnvironment(),
    const std::function<std::string()>& parentProcess = parentProcessId);

/// The first host of a Slurm node list in its compressed form:
/// "node[07-10,12],gpu3" gives "node07", "rack1-[2-4]-ib" gives "rack1-2-ib",
/// "10.0.0.5,10.0.0.6" gives "10.0.0.5".
/// @throws InvalidArgument for an empty list, unbalanced brackets or a range
///         that does not start with a number.
std::string firstSlurmHost(const std::string& nodelist);

}  // namespace gossamer

// discoverLaunch: each launcher's variables, the rendezvous rules and the
// errors for malformed values.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <map>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/launch_env.hpp"

using gossamer::discoverLaunch;
using gossamer::InvalidArgument;

namespace {

gossamer::EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("no launcher variables: no launch environment", "[launch]") {
  CHECK_FALSE(discoverLaunch(envOf({})).has_value());
  CHECK_FALSE(discoverLaunch(envOf({{"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}})).has_value());
}

TEST_CASE("torchrun: RANK and WORLD_SIZE, the store one port above the agent's", "[launch]") {
  const auto l = discoverLaunch(envOf({{"RANK", "2"},
                                       {"WORLD_SIZE", "4"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", "29500"},
                                       {"TORCHELASTIC_RUN_ID", "none"},
                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  REQUIRE(l);
  CHECK(l->launcher == "torchrun");
  CHECK(l->rank == 2);
  CHECK(l->worldSize == 4);
  CHECK(l->rendezvous == "tcp://127.0.0.1:29501");
}

TEST_CASE("RANK and WORLD_SIZE by hand: the store at MASTER_PORT itself", "[launch]") {
  const auto l = discoverLaunch(
      envOf({{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.5"}, {"MASTER_PORT", "4000"}}));
  REQUIRE(l);
  CHECK(l->launcher == "env");
  CHECK(l->rendezvous == "tcp://127.0.0.5:4000");
  // One rank meets nobody: no rendezvous, and no error for the want of one.
  const auto alone = discoverLaunch(envOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  REQUIRE(alone);
  CHECK(alone->worldSize == 1);
  CHECK(alone->rendezvous.empty());
  CHECK_THROWS_WITH(discoverLaunch(envOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("there is no rendezvous"));
}

TEST_CASE("Open MPI on one host: a directory named by the job", "[launch]") {
  const auto l = discoverLaunch(envOf({{"OMPI_COMM_WORLD_RANK", "3"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                       {"PMIX_NAMESPACE", "2040135681"},
                                       {"TMPDIR", "/scratch"}}));
  REQUIRE(l);
  CHECK(l->launcher == "mpirun");
  CHECK(l->rank == 3);
  CHECK(l->worldSize == 4);
  CHECK(l->rendezvous == "/scratch/gossamer-rendezvous-mpirun-2040135681");
  // Open MPI 5 (PRRTE) names the namespace "prterun-HOST-PID@N": the
  // characters a path should not hold become '_'.
  const auto five = discoverLaunch(envOf({{"OMPI_COMM_WORLD_RANK", "0"},
                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                          {"PMIX_NAMESPACE", "prterun-vm/1-1234@1"}}));
  REQUIRE(five);
  CHECK(five->rendezvous == "/tmp/gossamer-rendezvous-mpirun-prterun-vm_1-1234_1");
}

TEST_CASE("Open MPI on one host: two jobs with one job id but their own mpirun keys meet in two directories",
          "[launch]") {
  // The job id hashes the host name and mpirun's pid: a second host (a VM or
  // container) with the same name and pid gets it too, and may share TMPDIR.
  std::map<std::string, std::string> vars = {
      {"OMPI_COMM_WORLD_RANK", "0"},
      {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
      {"PMIX_NAMESPACE", "1420689409"},
      {"OMPI_MCA_orte_precondition_transports", "a22f7f05a4e5db54-83a2b6df0cb32889"}};
  const auto first = discoverLaunch(envOf(vars));
  vars["OMPI_MCA_orte_precondition_transports"] = "0b5e3c1d9a7f2468-1357924680abcdef";
  const auto second = discoverLaunch(envOf(vars));
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->rendezvous == "/tmp/gossamer-rendezvous-mpirun-1420689409-a22f7f05a4e5db54-83a2b6df0cb32889");
  CHECK(second->rendezvous != first->rendezvous);
  // A key that is not safe in a path is left out: the directory stays under TMPDIR.
  vars["OMPI_MCA_orte_precondition_transports"] = "../x";
  const auto unsafe = discoverLaunch(envOf(vars));
  REQUIRE(unsafe);
  CHECK(unsafe->rendezvous == "/tmp/gossamer-rendezvous-mpirun-1420689409");
}

TEST_CASE("Open MPI over several hosts needs MASTER_ADDR or GOSSAMER_RENDEZVOUS", "[launch]") {
  std::map<std::string, std::string> vars = {{"OMPI_COMM_WORLD_RANK", "1"},
                                             {"OMPI_COMM_WORLD_SIZE", "8"},
                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                             {"PMIX_NAMESPACE", "77"}};
  CHECK_THROWS_WITH(discoverLaunch(envOf(vars)), Catch::Contains("started by mpirun") &&
                                                     Catch::Contains("set MASTER_ADDR and MASTER_PORT"));
  vars["GOSSAMER_RENDEZVOUS"] = "tcp://10.0.0.1:5000";
  CHECK(discoverLaunch(envOf(vars))->rendezvous == "tcp://10.0.0.1:5000");
  vars["MASTER_ADDR"] = "127.0.0.1";
  vars["MASTER_PORT"] = "6000";
  CHECK(discoverLaunch(envOf(vars))->rendezvous == "tcp://10.0.0.1:5000");  // GOSSAMER_RENDEZVOUS first
}

TEST_CASE("MPICH Hydra and Slurm", "[launch]") {
  auto h = discoverLaunch(
      envOf({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "7000"}}));
  REQUIRE(h);
  CHECK(h->launcher == "hydra");
  CHECK(h->rank == 1);
  CHECK(h->rendezvous == "tcp://127.0.0.1:7000");
  // mpiexec on one host: every rank is a child of the host's proxy.
  const auto proxy = [] { return std::string("4242-1700"); };
  auto local = discoverLaunch(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MPI_LOCALNRANKS", "3"}}), proxy);
  REQUIRE(local);
  CHECK(local->rendezvous == "/tmp/gossamer-rendezvous-hydra-proxy-4242-1700");
  // Across hosts (fewer local ranks than the world) there is no shared directory.
  CHECK_THROWS_AS(
      discoverLaunch(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MPI_LOCALNRANKS", "2"}}), proxy),
      InvalidArgument);
  CHECK_THROWS_AS(discoverLaunch(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MPI_LOCALNRANKS", "3"}}),
                                 [] { return std::string(); }),
                  InvalidArgument);
  // This test's own parent: "<pid>-<start time>".
  const std::string mine = gossamer::parentProcessId();
  CHECK(mine.rfind(std::to_string(getppid()) + "-", 0) == 0);
  auto s = discoverLaunch(envOf({{"SLURM_PROCID", "5"},
                                 {"SLURM_NTASKS", "6"},
                                 {"SLURM_NNODES", "1"},
                                 {"SLURM_JOB_ID", "1234"},
                                 {"SLURM_STEP_ID", "0"}}));
  REQUIRE(s);
  CHECK(s->launcher == "srun");
  CHECK(s->rank == 5);
  CHECK(s->worldSize == 6);
  CHECK(s->rendezvous == "/tmp/gossamer-rendezvous-srun-1234.0");
}

TEST_CASE("Slurm over several nodes: the store on the step's first node, at a port of the job and step",
          "[launch]") {
  std::map<std::string, std::string> vars{{"SLURM_PROCID", "3"},
                                          {"SLURM_NTASKS", "8"},
                                          {"SLURM_NNODES", "2"},
                                          {"SLURM_JOB_ID", "1234"},
                                          {"SLURM_STEP_ID", "2"},
                                          {"SLURM_JOB_NODELIST", "gpu[1-9]"},
                                          {"SLURM_STEP_NODELIST", "node[07-08],login1"}};
  auto s = discoverLaunch(envOf(vars));
  REQUIRE(s);
  CHECK(s->rank == 3);
  CHECK(s->rendezvous == "tcp://node07:" + std::to_string(29500 + (7 * 1234 + 2) % 10000));
  vars.erase("SLURM_STEP_NODELIST");
  CHECK(discoverLaunch(envOf(vars))->rendezvous ==
        "tcp://gpu1:" + std::to_string(29500 + (7 * 1234 + 2) % 10000));
  vars["MASTER_ADDR"] = "10.1.1.1";
  vars["MASTER_PORT"] = "4000";
  CHECK(discoverLaunch(envOf(vars))->rendezvous == "tcp://10.1.1.1:4000");  // set by hand: first
  vars.erase("MASTER_ADDR");
  vars.erase("MASTER_PORT");
  vars["SLURM_JOB_NODELIST"] = "gpu[1-9";
  CHECK_THROWS_WITH(discoverLaunch(envOf(vars)), Catch::Contains("'gpu[1-9': '[' without ']'"));
}

TEST_CASE("the first host of a Slurm node list", "[launch]") {
  using gossamer::firstSlurmHost;
  CHECK(firstSlurmHost("node1") == "node1");
  CHECK(firstSlurmHost("node[07-10,12],gpu3") == "node07");
  CHECK(firstSlurmHost("node[12,07-10]") == "node12");
  CHECK(firstSlurmHost("rack1-[2-4]-ib,rack2-[1-4]-ib") == "rack1-2-ib");
  CHECK(firstSlurmHost("10.231.0.1,10.231.0.2") == "10.231.0.1");
  CHECK_THROWS_AS(firstSlurmHost(""), InvalidArgument);
  CHECK_THROWS_AS(firstSlurmHost(",node1"), InvalidArgument);
  CHECK_THROWS_AS(firstSlurmHost("node]1["), InvalidArgument);
  CHECK_THROWS_AS(firstSlurmHost("node[a-b]"), InvalidArgument);
  CHECK_THROWS_AS(firstSlurmHost("n[1-2]x[3-4]"), InvalidArgument);
}

TEST_CASE("torchrun's variables win over an enclosing Slurm allocation's", "[launch]") {
  const auto l = discoverLaunch(envOf({{"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", "29500"}}));
  REQUIRE(l);
  CHECK(l->rank == 1);
  CHECK(l->worldSize == 2);
}

TEST_CASE("malformed launcher variables are refused, naming the variable", "[launch]") {
  const std::map<std::string, std::string> ok = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto vars = ok;
    vars[k] = v;
    return envOf(vars);
  };
  CHECK_THROWS_WITH(discoverLaunch(with("RANK", "two")), Catch::Contains("RANK='two' is not an integer"));
  CHECK_THROWS_WITH(discoverLaunch(with("RANK", "2")), Catch::Contains("RANK=2 is outside [0, 1]"));
  CHECK_THROWS_WITH(discoverLaunch(with("RANK", "-1")), Catch::Contains("RANK=-1 is outside"));
  CHECK_THROWS_WITH(discoverLaunch(with("WORLD_SIZE", "0")), Catch::Contains("WORLD_SIZE=0 is outside"));
  CHECK_THROWS_WITH(discoverLaunch(with("WORLD_SIZE", "4x")), Catch::Contains("WORLD_SIZE='4x'"));
  CHECK_THROWS_WITH(discoverLaunch(with("MASTER_PORT", "70000")), Catch::Contains("MASTER_PORT=70000"));
  CHECK_THROWS_AS(discoverLaunch(with("MASTER_PORT", "")), InvalidArgument);
}

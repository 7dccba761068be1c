#include <shardalg/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  { shardalg::Group g = shardalg::MpiComm(MPI_COMM_WORLD); (void)g.size(); }
  MPI_Finalize();
}

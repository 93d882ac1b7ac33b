// Data-parallel training over MPI (OpenMPI): ranks split each step's sequences and sum gradients
// and statistics with MPI_Allreduce. Without MPI (or without mpirun) everything is one rank.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "train/mpi.h"

#ifdef DS_HAVE_MPI
#include <mpi.h>

static int g_init;

// MPI starts only under a launcher (mpirun sets these): a plain `dspark train` stays one process
// with no MPI runtime at all.
static int launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

void ds_mpi_init(int *argc, char ***argv) {
    if (!launched()) return;
    int done = 0;
    MPI_Initialized(&done);
    if (!done) MPI_Init(argc, argv);
    g_init = 1;
}

int ds_mpi_rank(void) {
    int r = 0;
    if (g_init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int ds_mpi_size(void) {
    int n = 1;
    if (g_init) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void ds_mpi_finalize(void) {
    if (g_init) MPI_Finalize();
    g_init = 0;
}

void ds_mpi_allreduce_sum(double *buf, size_t n) {
    if (!g_init || ds_mpi_size() == 1) return;
    if (n == 0) MPI_Barrier(MPI_COMM_WORLD);
    else MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

void ds_mpi_allreduce_sum_f(float *buf, size_t n) {
    if (!g_init || ds_mpi_size() == 1) return;
    for (size_t off = 0; off < n; off += (size_t)1 << 30) { // counts are ints
        const size_t m = n - off < ((size_t)1 << 30) ? n - off : ((size_t)1 << 30);
        MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
}

int ds_mpi_gather_root(const void *buf, size_t n, void **out, size_t *total) {
    *out = NULL;
    *total = 0;
    const int ranks = ds_mpi_size(), rank = ds_mpi_rank();
    if (!g_init || ranks == 1) {
        if (!(*out = malloc(n ? n : 1))) return -1;
        if (n) memcpy(*out, buf, n);
        *total = n;
        return 0;
    }
    if (n > 0x7fffffff) return -1; // MPI counts are ints (every rank must fail the same way: not checked)
    int mine = (int)n, *counts = NULL, *displs = NULL;
    if (rank == 0 && (!(counts = calloc((size_t)ranks, sizeof(int))) || !(displs = calloc((size_t)ranks, sizeof(int))))) {
        free(counts);
        return -1;
    }
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t sum = 0;
    for (int r = 0; rank == 0 && r < ranks; r++) {
        displs[r] = (int)sum;
        sum += (size_t)counts[r];
    }
    char *all = rank == 0 ? malloc(sum ? sum : 1) : NULL;
    MPI_Gatherv(buf, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(counts);
    free(displs);
    *out = all;
    *total = sum;
    return rank == 0 && !all ? -1 : 0;
}

#else

int ds_mpi_gather_root(const void *buf, size_t n, void **out, size_t *total) {
    *total = 0;
    if (!(*out = malloc(n ? n : 1))) return -1;
    if (n) memcpy(*out, buf, n);
    *total = n;
    return 0;
}

void ds_mpi_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
}
int ds_mpi_rank(void) { return 0; }
int ds_mpi_size(void) { return 1; }
void ds_mpi_finalize(void) {}
void ds_mpi_allreduce_sum(double *buf, size_t n) {
    (void)buf;
    (void)n;
}
void ds_mpi_allreduce_sum_f(float *buf, size_t n) {
    (void)buf;
    (void)n;
}

#endif

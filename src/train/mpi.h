// MPI for the data-parallel jobs (jobs/train.c, jobs/datagen.c): the collectives over ranks.
#ifndef DS_TRAIN_MPI_H
#define DS_TRAIN_MPI_H

#include "dspark/speculate.h"
#include "dspark/train.h"
#include "train/train.h"

// The train job (jobs/train.c) and ds_mpi_init / rank / size / finalize are public:
// include/dspark_jobs.h. The collectives the loop and datagen use (single-process fallbacks when
// built without MPI).

// Element-wise sums over all ranks, in place (a barrier when n is 0).
void ds_mpi_allreduce_sum(double *buf, size_t n);
void ds_mpi_allreduce_sum_f(float *buf, size_t n);
// Every rank's n bytes, concatenated in rank order, into a malloc'ed *out at rank 0 (*total bytes;
// other ranks get NULL and 0). Returns -1 when out of memory (or more than 2 GiB from one rank).
int ds_mpi_gather_root(const void *buf, size_t n, void **out, size_t *total);

#endif

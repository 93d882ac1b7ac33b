// Cost tables (dspark profile's costs file, read by --costs): load, then price every batch size.
#include "fuzz.h"
#include "sched/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_clear();
    const char *path = fuzz_write("costs.json", data, size);
    ds_cost_table t;
    if (ds_cost_table_load(path, &t) == DS_OK) {
        volatile double sink = 0;
        for (int B = 1; B <= 1024; B++) sink += ds_cost_sps(&t, B);
        sink += ds_schedule_max_admissions(&t, 8, 64);
        (void)sink;
    }
    return 0;
}

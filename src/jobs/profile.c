// dspark profile: the target's cost table SPS(B) (sched/profile.c measures it) and, with a drafter,
// the cost of drafting one full block, written to one JSON file (see include/dspark_jobs.h).
#include <cjson/cJSON.h>
#include <string.h>

#include "base/status.h"
#include "dspark_jobs.h"
#include "io/json.h"
#include "sched/schedule.h"

ds_profile_params ds_profile_default(void) {
    return (ds_profile_params){.bmax = 64, .ctx = 256, .repeats = 5};
}

ds_status ds_profile_run(const ds_model *m, const ds_drafter *d, const ds_profile_params *o, ds_profile_result *r) {
    memset(r, 0, sizeof *r);
    if (!o->out) return ds_fail(DS_ERR_INVALID, "profile needs an output file");
    r->threads = ds_threads();
    ds_status st = ds_profile_costs(m, o->bmax, o->ctx, o->repeats, o->quick, &r->costs);
    if (st) return st;
    if (d) { // one sequence drafting a full block after ctx rows (within the target's context)
        const int K = ds_drafter_get_info(d)->block_size, max_ctx = ds_model_get_info(m)->max_ctx;
        int ctx = o->ctx;
        if (ctx + K + 2 > max_ctx) ctx = max_ctx - K - 2;
        if (ctx > 1 << 16) ctx = 1 << 16;
        if (ctx < 1) ctx = 1;
        r->draft_block = K, r->draft_ctx = ctx;
        if ((st = ds_drafter_profile_round(d, 1, K, ctx, o->repeats, &r->draft_s))) return st;
    }
    cJSON *j = ds_cost_table_json(&r->costs, ds_model_get_info(m)->name, r->threads);
    if (j && d) {
        cJSON_AddNumberToObject(j, "draft_round_s", r->draft_s);
        cJSON_AddNumberToObject(j, "draft_block", r->draft_block);
        cJSON_AddStringToObject(j, "drafter", o->drafter_name ? o->drafter_name : "");
    }
    st = j ? ds_json_save(j, o->out) : ds_fail(DS_ERR_NOMEM, "out of memory");
    cJSON_Delete(j);
    return st;
}

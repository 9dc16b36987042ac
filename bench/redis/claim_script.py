"""Print the Lua script RedisStore runs for a claim (its prelude and body), read out of
idem-core/src/store/redis/scripts/, for redis-benchmark to run the same script with EVALSHA.

    python claim_script.py <the scripts folder>
"""

import os
import sys

folder = sys.argv[1]
prelude = open(os.path.join(folder, "prelude.lua")).read()
claim = open(os.path.join(folder, "claim.lua")).read()
sys.stdout.write(prelude + claim)

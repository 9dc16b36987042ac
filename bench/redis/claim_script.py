"""Print the Lua script RedisStore runs for a claim (its prelude and body), read out of
idem-core/src/store/redis.rs, for redis-benchmark to run the same script with EVALSHA.

    python claim_script.py <redis.rs>
"""

import re
import sys

src = open(sys.argv[1]).read()
prelude = re.search(r'const PRELUDE: &str = r#"(.*?)"#;', src, re.S).group(1)
claim = re.search(r'const CLAIM: &str = r#"(.*?)"#;', src, re.S).group(1)
sys.stdout.write(prelude + claim)

// Preloaded (node --import) by tests/mcp_fixtures.py: server-everything's streamable HTTP server
// listens on every interface; in the tests it listens on loopback only.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
    if ((typeof args[0] === "number" || typeof args[0] === "string") && typeof args[1] !== "string") {
        args.splice(1, 0, "127.0.0.1");
    }
    return listen.apply(this, args);
};

// Adds many ACLs in one Admin.createAcls call (one JVM instead of one kafka-acls.sh per rule).
// Run by `scripts/kafka-local.sh add-acls <file>` as the super user; each line of <file> is
//   principal<TAB>OPERATION<TAB>RESOURCE_TYPE<TAB>name<TAB>PATTERN_TYPE
// e.g. "User:dedupe-ingest	WRITE	TOPIC	events	LITERAL" (scripts/kafka_acls.py writes it).
import java.io.Reader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class AddAcls {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        try (Reader r = Files.newBufferedReader(Path.of(args[1]))) {
            config.load(r);
        }
        config.put("bootstrap.servers", args[0]);
        List<AclBinding> bindings = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[2]))) {
            if (line.isBlank()) continue;
            String[] f = line.split("\t");
            ResourcePattern resource = new ResourcePattern(
                ResourceType.valueOf(f[2]), f[3], PatternType.valueOf(f[4]));
            AccessControlEntry entry = new AccessControlEntry(
                f[0], "*", AclOperation.valueOf(f[1]), AclPermissionType.ALLOW);
            bindings.add(new AclBinding(resource, entry));
        }
        try (Admin admin = Admin.create(config)) {
            admin.createAcls(bindings).all().get();
        }
        System.err.println("kafka-local: added " + bindings.size() + " ACLs");
    }
}

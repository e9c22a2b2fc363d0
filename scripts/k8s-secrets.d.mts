export function k8sSecrets(opts?: {
  dev?: boolean;
  namespace?: string;
}): { apiVersion: string; kind: string; metadata: { name: string }; type: string; stringData: Record<string, string> }[];
